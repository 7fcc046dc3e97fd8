locals {
  # Every argument is `name = var.name`: terraform/check.py renders this same template from the
  # variables' defaults and runs `headroom config check` on the result.
  config_toml = templatefile("${path.module}/headroom.toml.tftpl", {
    cluster_id       = var.cluster_id
    regions          = var.regions
    launch_templates = var.launch_templates
    offerings        = var.offerings
    pools            = var.pools
    budgets          = var.budgets
    alert_webhooks   = var.alert_webhooks
  })
}

module "headroom" {
  source = "../../modules/aws"

  name                = var.name
  cluster_id          = var.cluster_id
  config_toml         = local.config_toml
  image               = var.image
  vpc_id              = var.vpc_id
  private_subnet_ids  = var.private_subnet_ids
  allowed_cidr_blocks = var.allowed_cidr_blocks
  certificate_arn     = var.certificate_arn
  api_domain_name     = var.api_domain_name
  instance_role_arns  = var.instance_role_arns
  sqs_queue_arns      = var.sqs_queue_arns
  tags                = { "app" = "headroom", "headroom-deployment" = var.cluster_id }
}
