output "api_url" {
  description = "URL of the Headroom API (internal ingress)."
  value       = module.headroom.api_url
}

output "database_endpoint" {
  description = "Private IP of the Cloud SQL ledger."
  value       = module.headroom.database_endpoint
}

output "admin_token_secret_id" {
  description = "Where to keep the bootstrap admin token (see terraform/README.md)."
  value       = module.headroom.admin_token_secret_id
}

output "granted_permissions" {
  description = "The GCP provider's permissions in the service's custom role."
  value       = module.headroom.granted_permissions
}
