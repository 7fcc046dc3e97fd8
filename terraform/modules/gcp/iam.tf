locals {
  labels = merge(var.labels, { "headroom-cluster" = var.cluster_id })
}

# The service's account, holding a custom role with exactly the GCP provider's permissions
# (crates/headroom-gcp/iam-permissions.txt) and, with node_service_account_email, actAs on that
# one account: the same module the multicloud example federates from AWS.
module "compute_access" {
  source = "../gcp-compute-access"

  project                    = var.project
  name                       = var.name
  cluster_id                 = var.cluster_id
  node_service_account_email = var.node_service_account_email
}

# Where these lived before the module existed: state moves, nothing is replaced.
moved {
  from = google_service_account.service
  to   = module.compute_access.google_service_account.this
}

moved {
  from = google_project_iam_custom_role.provider
  to   = module.compute_access.google_project_iam_custom_role.provider
}

moved {
  from = google_project_iam_member.provider
  to   = module.compute_access.google_project_iam_member.provider
}

moved {
  from = google_service_account_iam_member.node_user
  to   = module.compute_access.google_service_account_iam_member.node_user
}

# The Cloud SQL Auth Proxy sidecar connects as the service account.
resource "google_project_iam_member" "cloudsql_client" {
  project = var.project
  role    = "roles/cloudsql.client"
  member  = module.compute_access.service_account_member
}

# The migrate job's own identity: it reads the owner's database URL, which the service's
# account cannot, and connects through its own Auth Proxy sidecar. No cloud permissions.
resource "google_service_account" "migrate" {
  project      = var.project
  account_id   = "${var.name}-migrate"
  display_name = "Headroom ledger migrations (${var.cluster_id})"
}

resource "google_project_iam_member" "migrate_cloudsql_client" {
  project = var.project
  role    = "roles/cloudsql.client"
  member  = "serviceAccount:${google_service_account.migrate.email}"
}
