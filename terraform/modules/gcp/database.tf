# Private services access: Cloud SQL gets a private IP in the VPC and no public one.
resource "google_compute_global_address" "sql" {
  count         = var.create_private_service_access ? 1 : 0
  project       = var.project
  name          = "${var.name}-sql-range"
  purpose       = "VPC_PEERING"
  address_type  = "INTERNAL"
  prefix_length = 20
  network       = var.network
}

resource "google_service_networking_connection" "sql" {
  count                   = var.create_private_service_access ? 1 : 0
  network                 = var.network
  service                 = "servicenetworking.googleapis.com"
  reserved_peering_ranges = [google_compute_global_address.sql[0].name]
}

resource "google_sql_database_instance" "this" {
  #checkov:skip=CKV2_GCP_13:log_duration would log every statement of the ledger's many small queries each tick; Query Insights (enabled below) measures latency instead.
  #checkov:skip=CKV_GCP_79:A major upgrade of the ledger is a planned operation through db_version; the default is the newest major version this module was reviewed with (17).
  project             = var.project
  name                = var.name
  region              = var.region
  database_version    = var.db_version
  deletion_protection = var.deletion_protection

  settings {
    tier                        = var.db_tier
    availability_type           = var.db_high_availability ? "REGIONAL" : "ZONAL"
    disk_type                   = "PD_SSD"
    disk_size                   = var.db_disk_size_gb
    disk_autoresize             = true
    deletion_protection_enabled = var.deletion_protection
    user_labels                 = local.labels

    ip_configuration {
      ipv4_enabled    = false
      private_network = var.network
      # Only the Auth Proxy's mutual-TLS connections are accepted.
      ssl_mode = "TRUSTED_CLIENT_CERTIFICATE_REQUIRED"
    }

    backup_configuration {
      enabled                        = true
      start_time                     = "03:00"
      point_in_time_recovery_enabled = true
      transaction_log_retention_days = var.db_log_retention_days
      backup_retention_settings {
        retained_backups = var.db_backup_retention_count
        retention_unit   = "COUNT"
      }
    }

    maintenance_window {
      day  = 7
      hour = 4
    }

    insights_config {
      query_insights_enabled = true
    }

    # Audit-friendly logging, as the CIS benchmark for Cloud SQL PostgreSQL asks.
    database_flags {
      name  = "log_checkpoints"
      value = "on"
    }
    database_flags {
      name  = "log_connections"
      value = "on"
    }
    database_flags {
      name  = "log_disconnections"
      value = "on"
    }
    database_flags {
      name  = "log_lock_waits"
      value = "on"
    }
    database_flags {
      name  = "log_min_messages"
      value = "error"
    }
    database_flags {
      name  = "log_temp_files"
      value = "0"
    }
    database_flags {
      name  = "log_min_duration_statement"
      value = "-1"
    }
    database_flags {
      name  = "log_min_error_statement"
      value = "error"
    }
    database_flags {
      name  = "log_hostname"
      value = "on"
    }
    # Schema changes only: the ledger is append-only, so DDL is what auditors look for.
    database_flags {
      name  = "log_statement"
      value = "ddl"
    }
    database_flags {
      name  = "cloudsql.enable_pgaudit"
      value = "on"
    }
  }

  depends_on = [google_service_networking_connection.sql]
}

resource "google_sql_database" "headroom" {
  project  = var.project
  instance = google_sql_database_instance.this.name
  name     = "headroom"
}

# Kept in Terraform state (protect the state like the database). No URL-special characters. Two
# roles: the built-in user `headroom` owns the tables and only migrates (the migrate job); the
# runtime role the service runs as may SELECT and INSERT (and DELETE the engine's memory past its
# retention) and nothing else, so it cannot rewrite the ledger or touch its append-only triggers.
# The runtime role is created by `headroom migrate --runtime-role`, not as a Cloud SQL user:
# built-in users join cloudsqlsuperuser, which the runtime role must not.
resource "random_password" "db" {
  length  = 40
  special = false
}

resource "random_password" "runtime" {
  length  = 40
  special = false
}

resource "google_sql_user" "headroom" {
  project  = var.project
  instance = google_sql_database_instance.this.name
  name     = "headroom"
  password = random_password.db.result
}

locals {
  runtime_role = "headroom_runtime"
  # Through the Auth Proxy sidecar on localhost; the proxy encrypts the hop to Cloud SQL.
  # The service's URL: the runtime role.
  database_url = "postgres://${local.runtime_role}:${random_password.runtime.result}@127.0.0.1:5432/${google_sql_database.headroom.name}"
  # The owner's URL, for the migrate job only.
  owner_database_url = "postgres://${google_sql_user.headroom.name}:${random_password.db.result}@127.0.0.1:5432/${google_sql_database.headroom.name}"
}

resource "google_secret_manager_secret" "database_url" {
  project   = var.project
  secret_id = "${var.name}-database-url"
  labels    = local.labels
  replication {
    auto {}
  }
}

resource "google_secret_manager_secret_version" "database_url" {
  secret      = google_secret_manager_secret.database_url.id
  secret_data = local.database_url
}

resource "google_secret_manager_secret" "owner_database_url" {
  project   = var.project
  secret_id = "${var.name}-owner-database-url"
  labels    = local.labels
  replication {
    auto {}
  }
}

resource "google_secret_manager_secret_version" "owner_database_url" {
  secret      = google_secret_manager_secret.owner_database_url.id
  secret_data = local.owner_database_url
}

resource "google_secret_manager_secret" "runtime_password" {
  project   = var.project
  secret_id = "${var.name}-runtime-password"
  labels    = local.labels
  replication {
    auto {}
  }
}

resource "google_secret_manager_secret_version" "runtime_password" {
  secret      = google_secret_manager_secret.runtime_password.id
  secret_data = random_password.runtime.result
}

resource "google_secret_manager_secret" "config" {
  project   = var.project
  secret_id = "${var.name}-config"
  labels    = local.labels
  replication {
    auto {}
  }
}

resource "google_secret_manager_secret_version" "config" {
  secret      = google_secret_manager_secret.config.id
  secret_data = var.config_toml
}

# API tokens are minted by the service (`headroom token create`, which keeps only their hash),
# so Terraform creates the place for the first admin token, not its value.
resource "google_secret_manager_secret" "admin_token" {
  project   = var.project
  secret_id = "${var.name}-admin-api-token"
  labels    = local.labels
  replication {
    auto {}
  }
}

# The migrate job alone reads the owner's URL and the runtime password.
resource "google_secret_manager_secret_iam_member" "migrate_reads" {
  for_each = {
    owner_database_url = google_secret_manager_secret.owner_database_url.id
    runtime_password   = google_secret_manager_secret.runtime_password.id
  }
  project   = var.project
  secret_id = each.value
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.migrate.email}"
}

resource "google_secret_manager_secret_iam_member" "service_reads" {
  for_each = {
    database_url = google_secret_manager_secret.database_url.id
    config       = google_secret_manager_secret.config.id
  }
  project   = var.project
  secret_id = each.value
  role      = "roles/secretmanager.secretAccessor"
  member    = module.compute_access.service_account_member
}
