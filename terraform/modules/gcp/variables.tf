variable "project" {
  type        = string
  description = "Project the control plane runs in (and the GPU instances are launched in)."
}

variable "region" {
  type        = string
  description = "Region for Cloud Run and Cloud SQL, e.g. us-central1."
}

variable "name" {
  type        = string
  description = "Prefix for every resource this module creates (service, database instance, secrets, service account)."
  default     = "headroom"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,20}$", var.name))
    error_message = "name: 1-21 lower-case letters, digits or '-', starting with a letter (service account ids are limited to 30 characters)."
  }
}

variable "cluster_id" {
  type        = string
  description = "The configuration's cluster_id (the headroom-cluster label on the instances the service launches); set as a label on this module's resources."

  validation {
    condition     = can(regex("^[a-z0-9_-]{1,63}$", var.cluster_id))
    error_message = "cluster_id: 1-63 lower-case letters, digits, '_' or '-' (it is a GCP label value)."
  }
}

variable "config_toml" {
  type        = string
  description = "The service's configuration file (TOML), e.g. rendered with templatefile(); stored in Secret Manager and mounted as a file."
  sensitive   = true
}

variable "image" {
  type        = string
  description = "Container image of the headroom binary (built from the repository's Dockerfile with FEATURES=gcp), e.g. us-docker.pkg.dev/PROJECT/headroom/headroom:0.1.0."
}

variable "network" {
  type        = string
  description = "VPC network id (projects/P/global/networks/N) for Cloud SQL's private IP and the service's VPC egress."
}

variable "subnetwork" {
  type        = string
  description = "Subnetwork id in var.region that the service's Direct VPC egress uses."
}

variable "create_private_service_access" {
  type        = bool
  description = "Reserve a range and peer the network with servicenetworking for Cloud SQL private IP. Turn off if the network already has private services access."
  default     = true
}

variable "min_instances" {
  type        = number
  description = "Service instances always running. They share the database; each pool is reconciled by one instance at a time (advisory-lock leases)."
  default     = 2

  validation {
    condition     = var.min_instances >= 2
    error_message = "min_instances: at least 2, so the API and the reconcile loop survive one instance being replaced."
  }
}

variable "max_instances" {
  type        = number
  description = "Upper bound on service instances (each holds database connections)."
  default     = 4

  validation {
    condition     = var.max_instances >= 2 && var.max_instances <= 20
    error_message = "max_instances: 2 to 20."
  }
}

variable "cpu" {
  type        = string
  description = "CPU limit of the service container (Cloud Run syntax, e.g. \"1\")."
  default     = "1"
}

variable "memory" {
  type        = string
  description = "Memory limit of the service container (e.g. \"1Gi\")."
  default     = "1Gi"
}

variable "db_tier" {
  type        = string
  description = "Cloud SQL machine tier for the ledger database."
  default     = "db-custom-2-7680"
}

variable "db_version" {
  type        = string
  description = "Cloud SQL PostgreSQL version."
  default     = "POSTGRES_17"

  validation {
    condition     = can(regex("^POSTGRES_1[4-9]$", var.db_version))
    error_message = "db_version: POSTGRES_14 or later, e.g. \"POSTGRES_17\"."
  }
}

variable "db_disk_size_gb" {
  type        = number
  description = "Initial disk size in GB (grows automatically)."
  default     = 50
}

variable "db_high_availability" {
  type        = bool
  description = "Regional (high availability) Cloud SQL instance with a standby in a second zone."
  default     = true
}

variable "db_backup_retention_count" {
  type        = number
  description = "Daily automated backups kept."
  default     = 14

  validation {
    condition     = var.db_backup_retention_count >= 7
    error_message = "db_backup_retention_count: at least 7; the ledger is what finance audits."
  }
}

variable "db_log_retention_days" {
  type        = number
  description = "Days of write-ahead log kept for point-in-time recovery (1-7)."
  default     = 7

  validation {
    condition     = var.db_log_retention_days >= 1 && var.db_log_retention_days <= 7
    error_message = "db_log_retention_days: 1 to 7."
  }
}

variable "deletion_protection" {
  type        = bool
  description = "Refuse to delete the database and the service until this is turned off."
  default     = true
}

variable "node_service_account_email" {
  type        = string
  description = "Service account the GPU instances run as; the service gets roles/iam.serviceAccountUser on it (and only on it) to launch them. Null: instances without a service account."
  default     = null
}

variable "cloud_sql_proxy_image" {
  type        = string
  description = "Cloud SQL Auth Proxy sidecar image: it reaches the database over private IP with TLS and IAM authorization, so the service talks plain PostgreSQL to localhost."
  default     = "gcr.io/cloud-sql-connectors/cloud-sql-proxy:2.14.1"
}

variable "labels" {
  type        = map(string)
  description = "Labels added to every resource that takes them."
  default     = {}
}
