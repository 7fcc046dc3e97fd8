locals {
  # The one list of permissions the GCP provider's calls need, kept beside its code (a test
  # there keeps it in step with the calls).
  permissions_file = "${path.module}/../../../crates/headroom-gcp/iam-permissions.txt"
  provider_permissions = sort(distinct([
    for line in split("\n", file(local.permissions_file)) :
    trimspace(line) if trimspace(line) != "" && !startswith(trimspace(line), "#")
  ]))

  member = "serviceAccount:${google_service_account.this.email}"
}

# The GCP provider's identity: whoever runs `headroom serve` with GCP offerings acts as this
# account (Cloud Run directly, an AWS task through workload identity federation).
resource "google_service_account" "this" {
  project      = var.project
  account_id   = "${var.name}-svc"
  display_name = "Headroom control plane (${var.cluster_id})"
}

# Exactly the provider's permissions. GCP IAM cannot condition on instance labels, so the role
# applies project-wide; the service itself only touches instances labelled with its cluster_id.
resource "google_project_iam_custom_role" "provider" {
  project     = var.project
  role_id     = "${replace(var.name, "-", "_")}_provider"
  title       = "Headroom cloud provider (${var.name})"
  description = "The Compute Engine permissions the Headroom GCP provider uses; from crates/headroom-gcp/iam-permissions.txt."
  permissions = local.provider_permissions

  lifecycle {
    precondition {
      condition     = length(local.provider_permissions) > 0 && alltrue([for p in local.provider_permissions : can(regex("^[a-z]+\\.[A-Za-z]+\\.[A-Za-z]+$", p))])
      error_message = "crates/headroom-gcp/iam-permissions.txt: one permission per line like compute.instances.create."
    }
    # actAs on the whole project would let the service run instances as any service account.
    precondition {
      condition     = !contains(local.provider_permissions, "iam.serviceAccounts.actAs")
      error_message = "crates/headroom-gcp/iam-permissions.txt: remove iam.serviceAccounts.actAs; set node_service_account_email and the module grants it on that one account."
    }
  }
}

resource "google_project_iam_member" "provider" {
  project = var.project
  role    = google_project_iam_custom_role.provider.id
  member  = local.member
}

# Launching an instance that runs as a service account needs actAs on that account: granted on
# the nodes' one account, never project-wide.
resource "google_service_account_iam_member" "node_user" {
  count              = var.node_service_account_email == null ? 0 : 1
  service_account_id = "projects/${var.project}/serviceAccounts/${var.node_service_account_email}"
  role               = "roles/iam.serviceAccountUser"
  member             = local.member
}
