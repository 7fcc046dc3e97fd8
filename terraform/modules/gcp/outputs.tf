output "api_url" {
  description = "URL of the Headroom API (Cloud Run, internal ingress: reachable from the VPC)."
  value       = google_cloud_run_v2_service.this.uri
}

output "database_endpoint" {
  description = "Private IP of the Cloud SQL ledger (clients go through the Cloud SQL Auth Proxy)."
  value       = google_sql_database_instance.this.private_ip_address
}

output "database_connection_name" {
  description = "Cloud SQL connection name (project:region:instance) for the Auth Proxy."
  value       = google_sql_database_instance.this.connection_name
}

output "database_url_secret_id" {
  description = "Secret Manager secret holding the service's HEADROOM_DATABASE_URL (the runtime role: SELECT and INSERT, DELETE of the engine's memory past its retention only; through a proxy on localhost)."
  value       = google_secret_manager_secret.database_url.id
}

output "owner_database_url_secret_id" {
  description = "Secret Manager secret holding the owner's URL, for `headroom migrate` only (the migrate job reads it)."
  value       = google_secret_manager_secret.owner_database_url.id
}

output "migrate_job_name" {
  description = "Cloud Run job running `headroom migrate --runtime-role`; Terraform runs it when the image or a password changes (`gcloud run jobs execute` runs it again)."
  value       = google_cloud_run_v2_job.migrate.name
}

output "runtime_role" {
  description = "PostgreSQL role the service runs as (created and granted by `headroom migrate --runtime-role`)."
  value       = local.runtime_role
}

output "admin_token_secret_id" {
  description = "Secret Manager secret to keep the bootstrap admin API token in."
  value       = google_secret_manager_secret.admin_token.id
}

output "service_account_email" {
  description = "Service account the service runs as."
  value       = module.compute_access.service_account_email
}

output "granted_permissions" {
  description = "The provider's permissions from crates/headroom-gcp/iam-permissions.txt, in the custom role."
  value       = module.compute_access.granted_permissions
}
