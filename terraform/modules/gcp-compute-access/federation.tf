# Workload identity federation from one AWS IAM role (the AWS control plane's task role): its
# sessions exchange a signed sts:GetCallerIdentity request for a federated token and impersonate
# the service account above. No service account key exists anywhere; AWS needs no permission
# for it (GetCallerIdentity needs none), so the task role gains nothing.
locals {
  federated = var.aws_role_arn != null
  # arn:PARTITION:iam::ACCOUNT:role/[PATH/]NAME -> the ARN its sessions carry in STS, without
  # the session name: arn:PARTITION:sts::ACCOUNT:assumed-role/NAME (the path is not in it).
  aws_role         = local.federated ? regex("^arn:(?P<partition>aws[a-z-]*):iam::(?P<account>[0-9]{12}):role/(?:[^/]+/)*(?P<name>[^/]+)$", var.aws_role_arn) : null
  aws_assumed_role = local.federated ? "arn:${local.aws_role.partition}:sts::${local.aws_role.account}:assumed-role/${local.aws_role.name}" : null
}

resource "google_iam_workload_identity_pool" "aws" {
  count                     = local.federated ? 1 : 0
  project                   = var.project
  workload_identity_pool_id = "${var.name}-aws"
  # Display names are limited to 32 characters: 11 + a name of at most 21.
  display_name = "Headroom (${var.name})"
  description  = "The Headroom control plane's ECS task role in AWS account ${local.aws_role.account}."

  lifecycle {
    precondition {
      condition     = !startswith("${var.name}-aws", "gcp-")
      error_message = "name: workload identity pool ids may not start with \"gcp-\"; choose another name."
    }
  }
}

resource "google_iam_workload_identity_pool_provider" "aws" {
  #checkov:skip=CKV_GCP_125:A GitHub Actions OIDC check; checkov 3.3.30 fails every provider without an oidc block (it indexes the missing block). This one is AWS-only and its attribute_condition admits one role.
  count                              = local.federated ? 1 : 0
  project                            = var.project
  workload_identity_pool_id          = google_iam_workload_identity_pool.aws[0].workload_identity_pool_id
  workload_identity_pool_provider_id = "aws-task-role"
  display_name                       = "AWS ${local.aws_role.account}"
  description                        = "Sessions of ${var.aws_role_arn} only."

  aws {
    account_id = local.aws_role.account
  }

  # GCP's default mapping for AWS: aws_role is the assumed-role ARN without the session name.
  attribute_mapping = {
    "google.subject"     = "assertion.arn"
    "attribute.aws_role" = "assertion.arn.contains('assumed-role') ? assertion.arn.extract('{account_arn}assumed-role/') + 'assumed-role/' + assertion.arn.extract('assumed-role/{role_name}/') : assertion.arn"
  }
  # Every other identity of the account (users, other roles, EC2 instance profiles) is refused
  # at the token exchange, before any IAM binding is consulted.
  attribute_condition = "attribute.aws_role == '${local.aws_assumed_role}'"
}

# Impersonation of this one account, by that role's sessions only: on the service account,
# never on the project.
resource "google_service_account_iam_member" "workload_identity_user" {
  count              = local.federated ? 1 : 0
  service_account_id = google_service_account.this.name
  role               = "roles/iam.workloadIdentityUser"
  member             = "principalSet://iam.googleapis.com/${google_iam_workload_identity_pool.aws[0].name}/attribute.aws_role/${local.aws_assumed_role}"
}

# The credential configuration file the service reads through GOOGLE_APPLICATION_CREDENTIALS
# (the format `gcloud iam workload-identity-pools create-cred-config --aws` writes). It holds
# no secret: names and URLs only; the AWS credentials that sign the subject token are the
# process's own. The region comes from AWS_REGION (set by modules/aws), so no metadata URL is
# listed: ECS tasks have no EC2 instance metadata for their task role.
locals {
  credential_config = local.federated ? jsonencode({
    universe_domain                   = "googleapis.com"
    type                              = "external_account"
    audience                          = "//iam.googleapis.com/${google_iam_workload_identity_pool_provider.aws[0].name}"
    subject_token_type                = "urn:ietf:params:aws:token-type:aws4_request"
    token_url                         = "https://sts.googleapis.com/v1/token"
    service_account_impersonation_url = "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/${google_service_account.this.email}:generateAccessToken"
    credential_source = {
      environment_id                 = "aws1"
      regional_cred_verification_url = "https://sts.{region}.amazonaws.com?Action=GetCallerIdentity&Version=2011-06-15"
    }
  }) : null
}
