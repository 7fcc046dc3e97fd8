output "api_url" {
  description = "Base URL of the Headroom API."
  value       = module.headroom.api_url
}

output "database_endpoint" {
  description = "host:port of the PostgreSQL ledger."
  value       = module.headroom.database_endpoint
}

output "admin_token_secret_arn" {
  description = "Where to keep the bootstrap admin token (see terraform/README.md)."
  value       = module.headroom.admin_token_secret_arn
}

output "granted_actions" {
  description = "The AWS provider's IAM actions, by policy statement."
  value       = module.headroom.granted_actions
}
