output "service_account_email" {
  description = "The GCP provider's service account (holding the custom role)."
  value       = google_service_account.this.email
}

output "service_account_member" {
  description = "The service account as an IAM member (serviceAccount:EMAIL), for further grants such as secrets."
  value       = local.member
}

output "granted_permissions" {
  description = "The provider's permissions from crates/headroom-gcp/iam-permissions.txt, in the custom role."
  value       = google_project_iam_custom_role.provider.permissions
}

output "workload_identity_provider" {
  description = "Full name of the workload identity pool provider trusting the AWS role (null without aws_role_arn)."
  value       = local.federated ? google_iam_workload_identity_pool_provider.aws[0].name : null
}

output "credential_config" {
  description = "External-account credential configuration (JSON) for GOOGLE_APPLICATION_CREDENTIALS in the AWS task; no secret in it. Null without aws_role_arn."
  value       = local.credential_config
  # Usable only once the role is granted and the impersonation allowed.
  depends_on = [
    google_project_iam_member.provider,
    google_service_account_iam_member.workload_identity_user,
  ]
}
