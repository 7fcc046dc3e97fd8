locals {
  # Every argument is `name = var.name`: terraform/check.py renders this same template from the
  # variables' defaults and runs `headroom config check` on the result.
  config_toml = templatefile("${path.module}/headroom.toml.tftpl", {
    cluster_id            = var.cluster_id
    regions               = var.regions
    launch_templates      = var.launch_templates
    gcp_project           = var.gcp_project
    gcp_zones             = var.gcp_zones
    gcp_instance_template = var.gcp_instance_template
    offerings             = var.offerings
    pools                 = var.pools
    budgets               = var.budgets
    alert_webhooks        = var.alert_webhooks
  })
}

# The control plane on AWS: RDS ledger, ECS Fargate service, secrets, and the task role holding
# the AWS provider's policy. The GCP credential configuration reaches the task as a file.
module "headroom" {
  source = "../../modules/aws"

  name                     = var.name
  cluster_id               = var.cluster_id
  config_toml              = local.config_toml
  image                    = var.image
  vpc_id                   = var.vpc_id
  private_subnet_ids       = var.private_subnet_ids
  allowed_cidr_blocks      = var.allowed_cidr_blocks
  certificate_arn          = var.certificate_arn
  api_domain_name          = var.api_domain_name
  instance_role_arns       = var.instance_role_arns
  sqs_queue_arns           = var.sqs_queue_arns
  google_credential_config = module.gcp_access.credential_config
  tags                     = { "app" = "headroom", "headroom-deployment" = var.cluster_id }
}

# The APIs the federated service calls: token exchange (sts), impersonation (iamcredentials)
# and Compute Engine; left enabled on destroy (other workloads may need them).
resource "google_project_service" "apis" {
  for_each = toset([
    "compute.googleapis.com",
    "iam.googleapis.com",
    "iamcredentials.googleapis.com",
    "sts.googleapis.com",
  ])
  project            = var.gcp_project
  service            = each.value
  disable_on_destroy = false
}

# The GCP side: a service account holding only the provider's custom role, which sessions of
# the ECS task role (and nothing else in the AWS account) may impersonate.
module "gcp_access" {
  source     = "../../modules/gcp-compute-access"
  depends_on = [google_project_service.apis]

  project                    = var.gcp_project
  name                       = var.name
  cluster_id                 = var.cluster_id
  node_service_account_email = var.gcp_node_service_account_email
  aws_role_arn               = module.headroom.task_role_arn
}
