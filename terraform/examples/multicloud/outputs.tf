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
  description = "The AWS provider's IAM actions, by policy statement (the task role's only policy)."
  value       = module.headroom.granted_actions
}

output "gcp_service_account_email" {
  description = "The GCP service account the task acts as (the custom role only)."
  value       = module.gcp_access.service_account_email
}

output "gcp_granted_permissions" {
  description = "The GCP provider's permissions in that account's custom role."
  value       = module.gcp_access.granted_permissions
}

output "workload_identity_provider" {
  description = "The workload identity pool provider that trusts the task role's sessions."
  value       = module.gcp_access.workload_identity_provider
}

output "google_credential_config" {
  description = "The external-account credential configuration the task reads through GOOGLE_APPLICATION_CREDENTIALS (no secret in it)."
  value       = module.gcp_access.credential_config
}
