variable "project" {
  type        = string
  description = "Project the GPU instances are launched in: the custom role and the service account are made here."
}

variable "name" {
  type        = string
  description = "Prefix for the service account (<name>-svc), the custom role (<name>_provider) and the workload identity pool (<name>-aws)."
  default     = "headroom"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,20}$", var.name))
    error_message = "name: 1-21 lower-case letters, digits or '-', starting with a letter (service account ids are limited to 30 characters)."
  }
}

variable "cluster_id" {
  type        = string
  description = "The configuration's cluster_id, shown in the service account's display name; the provider only touches instances labelled headroom-cluster = cluster_id."

  validation {
    condition     = length(var.cluster_id) >= 1 && length(var.cluster_id) <= 63
    error_message = "cluster_id: 1-63 characters, as the service's configuration requires."
  }
}

variable "node_service_account_email" {
  type        = string
  description = "Service account the GPU instances run as; the provider's account gets roles/iam.serviceAccountUser on it (and only on it) to launch them. Null: instances without a service account."
  default     = null
}

variable "aws_role_arn" {
  type        = string
  description = "IAM role (arn:aws:iam::ACCOUNT:role/NAME) whose sessions may act as the service account through workload identity federation: the AWS control plane's task role. Null: no federation (the account is used directly, e.g. by Cloud Run)."
  default     = null

  validation {
    condition     = var.aws_role_arn == null || can(regex("^arn:aws[a-z-]*:iam::[0-9]{12}:role/([^/]+/)*[^/]+$", var.aws_role_arn))
    error_message = "aws_role_arn: an IAM role ARN such as arn:aws:iam::123456789012:role/headroom-task (not an assumed-role or user ARN)."
  }
}
