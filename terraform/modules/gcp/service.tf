locals {
  container_port = 8080
  config_dir     = "/etc/headroom-config"
}

resource "google_cloud_run_v2_service" "this" {
  project  = var.project
  name     = var.name
  location = var.region
  labels   = local.labels
  # Reachable from the VPC (and internal load balancers) only.
  ingress             = "INGRESS_TRAFFIC_INTERNAL_ONLY"
  deletion_protection = var.deletion_protection
  # Headroom authenticates every call with its own bearer tokens in the Authorization header,
  # which a Cloud Run IAM check would consume; access is limited by internal ingress instead.
  invoker_iam_disabled = true

  template {
    service_account = module.compute_access.service_account_email
    labels          = local.labels

    scaling {
      min_instance_count = var.min_instances
      max_instance_count = var.max_instances
    }

    vpc_access {
      network_interfaces {
        network    = var.network
        subnetwork = var.subnetwork
      }
      egress = "PRIVATE_RANGES_ONLY"
    }

    containers {
      name  = "headroom"
      image = var.image
      args  = ["serve", "--config", "${local.config_dir}/headroom.toml", "--listen", "0.0.0.0:${local.container_port}"]

      ports {
        container_port = local.container_port
      }

      # The runtime role's URL: it can add ledger rows, not rewrite them or change the schema.
      env {
        name = "HEADROOM_DATABASE_URL"
        value_source {
          secret_key_ref {
            secret  = google_secret_manager_secret.database_url.secret_id
            version = google_secret_manager_secret_version.database_url.version
          }
        }
      }

      resources {
        limits = {
          cpu    = var.cpu
          memory = var.memory
        }
        # The reconcile loop runs between requests: CPU must stay allocated.
        cpu_idle = false
      }

      volume_mounts {
        name       = "config"
        mount_path = local.config_dir
      }

      # Ready once the ledger answers and the loop has ticked; alive as long as the process serves.
      startup_probe {
        http_get {
          path = "/readyz"
          port = local.container_port
        }
        period_seconds    = 5
        failure_threshold = 24
      }
      liveness_probe {
        http_get {
          path = "/healthz"
          port = local.container_port
        }
        period_seconds = 15
      }

      depends_on = ["cloud-sql-proxy"]
    }

    containers {
      name  = "cloud-sql-proxy"
      image = var.cloud_sql_proxy_image
      args = [
        "--private-ip",
        "--port=5432",
        "--health-check",
        "--http-address=0.0.0.0",
        google_sql_database_instance.this.connection_name,
      ]
      resources {
        limits = {
          cpu    = "0.5"
          memory = "256Mi"
        }
        cpu_idle = false
      }
      startup_probe {
        http_get {
          path = "/startup"
          port = 9090
        }
        period_seconds    = 2
        failure_threshold = 30
      }
    }

    volumes {
      name = "config"
      secret {
        secret = google_secret_manager_secret.config.secret_id
        items {
          version = google_secret_manager_secret_version.config.version
          path    = "headroom.toml"
        }
      }
    }
  }

  depends_on = [
    # The schema is current and the runtime role granted before any revision starts.
    google_cloud_run_v2_job.migrate,
    google_secret_manager_secret_iam_member.service_reads,
    google_project_iam_member.cloudsql_client,
    module.compute_access,
  ]
}

# `headroom migrate --runtime-role` as the owner (the built-in user): migrates, creates the runtime
# role with its password and leaves it SELECT and INSERT (and DELETE of the engine's memory past its
# retention only). Terraform runs it and waits for it (run_execution_token, google-beta) whenever
# the image or a password changes, before the service's new revision. Its own service account reads
# the owner's URL; the service's cannot.
resource "google_cloud_run_v2_job" "migrate" {
  provider            = google-beta
  project             = var.project
  name                = "${var.name}-migrate"
  location            = var.region
  labels              = local.labels
  deletion_protection = var.deletion_protection
  # A job name plus its token stay under 63 characters: 29 + 24.
  run_execution_token = substr(sha256(join("\n", [var.image, random_password.db.result, random_password.runtime.result])), 0, 24)

  template {
    labels = local.labels
    template {
      service_account = google_service_account.migrate.email
      max_retries     = 3
      timeout         = "300s"

      vpc_access {
        network_interfaces {
          network    = var.network
          subnetwork = var.subnetwork
        }
        egress = "PRIVATE_RANGES_ONLY"
      }

      containers {
        name  = "migrate"
        image = var.image
        args  = ["migrate", "--runtime-role", local.runtime_role]
        env {
          name = "HEADROOM_DATABASE_URL"
          value_source {
            secret_key_ref {
              secret  = google_secret_manager_secret.owner_database_url.secret_id
              version = google_secret_manager_secret_version.owner_database_url.version
            }
          }
        }
        env {
          name = "HEADROOM_RUNTIME_PASSWORD"
          value_source {
            secret_key_ref {
              secret  = google_secret_manager_secret.runtime_password.secret_id
              version = google_secret_manager_secret_version.runtime_password.version
            }
          }
        }
        depends_on = ["cloud-sql-proxy"]
      }

      # The same Auth Proxy as the service's; stopped when the migrate container exits.
      containers {
        name  = "cloud-sql-proxy"
        image = var.cloud_sql_proxy_image
        args = [
          "--private-ip",
          "--port=5432",
          "--health-check",
          "--http-address=0.0.0.0",
          "--exit-zero-on-sigterm",
          google_sql_database_instance.this.connection_name,
        ]
        startup_probe {
          http_get {
            path = "/startup"
            port = 9090
          }
          period_seconds    = 2
          failure_threshold = 30
        }
      }
    }
  }

  depends_on = [
    google_secret_manager_secret_iam_member.migrate_reads,
    google_project_iam_member.migrate_cloudsql_client,
    google_sql_user.headroom,
  ]
}
