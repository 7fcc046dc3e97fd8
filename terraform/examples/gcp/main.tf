locals {
  # Every argument is `name = var.name`: terraform/check.py renders this same template from the
  # variables' defaults and runs `headroom config check` on the result.
  config_toml = templatefile("${path.module}/headroom.toml.tftpl", {
    cluster_id        = var.cluster_id
    project           = var.project
    zones             = var.zones
    instance_template = var.instance_template
    offerings         = var.offerings
    pools             = var.pools
    budgets           = var.budgets
    alert_webhooks    = var.alert_webhooks
  })
}

# The APIs the control plane uses; left enabled on destroy (other workloads may need them).
resource "google_project_service" "apis" {
  for_each = toset([
    "compute.googleapis.com",
    "iam.googleapis.com",
    "run.googleapis.com",
    "secretmanager.googleapis.com",
    "servicenetworking.googleapis.com",
    "sqladmin.googleapis.com",
  ])
  project            = var.project
  service            = each.value
  disable_on_destroy = false
}

module "headroom" {
  source     = "../../modules/gcp"
  depends_on = [google_project_service.apis]

  project                    = var.project
  region                     = var.region
  name                       = var.name
  cluster_id                 = var.cluster_id
  config_toml                = local.config_toml
  image                      = var.image
  network                    = var.network
  subnetwork                 = var.subnetwork
  node_service_account_email = var.node_service_account_email
  labels                     = { "app" = "headroom" }
}
