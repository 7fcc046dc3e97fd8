variable "name" {
  type        = string
  description = "Prefix for every resource this module creates (ECS cluster, ALB, RDS instance, secrets, roles)."
  default     = "headroom"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,22}$", var.name))
    error_message = "name: 1-23 lower-case letters, digits or '-', starting with a letter (ALB and target group names are limited to 32 characters)."
  }
}

variable "cluster_id" {
  type        = string
  description = "The configuration's cluster_id: the value of the headroom-cluster tag on every instance the service launches. The service's IAM policy only lets it touch instances and Auto Scaling groups carrying this tag."

  validation {
    condition     = length(var.cluster_id) >= 1 && length(var.cluster_id) <= 63
    error_message = "cluster_id: 1-63 characters, as the service's configuration requires."
  }
}

variable "config_toml" {
  type        = string
  description = "The service's configuration file (TOML), e.g. rendered with templatefile(); stored in Secrets Manager because alert webhook URLs can be credentials."
  sensitive   = true
}

variable "image" {
  type        = string
  description = "Container image of the headroom binary (built from the repository's Dockerfile with FEATURES=aws), e.g. 123456789012.dkr.ecr.us-east-1.amazonaws.com/headroom:0.1.0."
}

variable "vpc_id" {
  type        = string
  description = "VPC for the load balancer, the tasks and the database."
}

variable "private_subnet_ids" {
  type        = list(string)
  description = "Private subnets in at least two availability zones, for the internal load balancer, the tasks and the database. Tasks need a route to the AWS APIs (NAT gateway or VPC endpoints)."

  validation {
    condition     = length(var.private_subnet_ids) >= 2
    error_message = "private_subnet_ids: give at least two subnets in different availability zones (ALB and RDS require it)."
  }
}

variable "allowed_cidr_blocks" {
  type        = list(string)
  description = "Networks allowed to reach the API on the internal load balancer (port 443): the clusters and tools that request capacity."

  validation {
    condition     = alltrue([for c in var.allowed_cidr_blocks : can(cidrhost(c, 0)) && c != "0.0.0.0/0"])
    error_message = "allowed_cidr_blocks: CIDR blocks, and not 0.0.0.0/0 (the API spends money; name the networks that may call it)."
  }
}

variable "certificate_arn" {
  type        = string
  description = "ACM certificate for the load balancer's HTTPS listener. Bearer tokens cross the network, so the API is served over TLS only."
}

variable "api_domain_name" {
  type        = string
  description = "DNS name the certificate covers and clients use (you create the record pointing at the load balancer). Null: api_url uses the load balancer's own DNS name."
  default     = null
}

variable "desired_count" {
  type        = number
  description = "Service replicas. They share the database; each pool is reconciled by one replica at a time (advisory-lock leases), so two or more keep the API up through a task failure."
  default     = 2

  validation {
    condition     = var.desired_count >= 2
    error_message = "desired_count: at least 2, so the API survives one task failing or being replaced."
  }
}

variable "cpu" {
  type        = number
  description = "Fargate task CPU units (1024 = 1 vCPU)."
  default     = 512
}

variable "memory" {
  type        = number
  description = "Fargate task memory in MiB (must be valid for the chosen cpu)."
  default     = 1024
}

variable "db_instance_class" {
  type        = string
  description = "RDS instance class for the ledger database."
  default     = "db.t4g.medium"
}

variable "db_engine_version" {
  type        = string
  description = "PostgreSQL major version (the parameter group family is postgres<version>)."
  default     = "17"

  validation {
    condition     = can(regex("^1[4-9]$", var.db_engine_version))
    error_message = "db_engine_version: a PostgreSQL major version from 14 up, e.g. \"17\"."
  }
}

variable "db_allocated_storage" {
  type        = number
  description = "Initial database storage in GiB."
  default     = 50
}

variable "db_max_allocated_storage" {
  type        = number
  description = "Storage autoscaling ceiling in GiB (the ledger is append-only and grows)."
  default     = 500
}

variable "db_multi_az" {
  type        = bool
  description = "Run the database with a synchronous standby in a second availability zone."
  default     = true
}

variable "db_backup_retention_days" {
  type        = number
  description = "Days of automated backups (point-in-time recovery window) kept for the ledger."
  default     = 14

  validation {
    condition     = var.db_backup_retention_days >= 7 && var.db_backup_retention_days <= 35
    error_message = "db_backup_retention_days: 7 to 35; the ledger is what finance audits."
  }
}

variable "db_deletion_protection" {
  type        = bool
  description = "Refuse to delete the database (and the load balancer) until this is turned off."
  default     = true
}

variable "database_require_tls" {
  type        = bool
  description = "Require TLS between the service and PostgreSQL (rds.force_ssl and sslmode=require in the database URL)."
  default     = true
}

variable "log_retention_days" {
  type        = number
  description = "Days CloudWatch keeps the service's logs."
  default     = 365

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_days)
    error_message = "log_retention_days: one of the values CloudWatch Logs accepts (1, 3, 5, 7, 14, 30, 60, 90, ..., 365, ..., 3653)."
  }
}

variable "instance_role_arns" {
  type        = list(string)
  description = "IAM roles (of the instance profiles in the launch templates) the service may pass to the GPU instances it launches. Empty: roles named <name>-node-* in this account."
  default     = []
}

variable "sqs_queue_arns" {
  type        = list(string)
  description = "SQS queues the service reads spot interruption and instance state events from. Empty: queues named <name>-* in this account."
  default     = []
}

variable "alert_egress" {
  type = list(object({
    port        = number
    cidr_blocks = list(string)
    description = string
  }))
  description = "Extra outbound rules for alert webhooks on ports other than 443 (e.g. Alertmanager on 9093). Port 443 is open to everywhere for the AWS APIs."
  default     = []
}

variable "alb_access_logs_bucket" {
  type        = string
  description = "S3 bucket for the load balancer's access logs (it must allow the ELB log delivery principal). Null: no access logs."
  default     = null
}

variable "google_credential_config" {
  type        = string
  description = "For GCP offerings: an external-account credential configuration (JSON, e.g. the credential_config output of modules/gcp-compute-access) that lets the task role act as a GCP service account through workload identity federation. It holds no secret and is passed as a plain environment variable, written to /run/headroom/google-credentials.json and named by GOOGLE_APPLICATION_CREDENTIALS. Null: no GCP credentials."
  default     = null

  validation {
    condition     = var.google_credential_config == null || try(jsondecode(var.google_credential_config).type == "external_account", false)
    error_message = "google_credential_config: an external_account credential configuration (JSON with \"type\": \"external_account\"); never a service account key."
  }
}

variable "tags" {
  type        = map(string)
  description = "Tags added to every resource."
  default     = {}
}
