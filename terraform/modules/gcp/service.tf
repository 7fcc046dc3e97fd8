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
    service_account = google_service_account.service.email
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
    google_secret_manager_secret_iam_member.service_reads,
    google_project_iam_member.cloudsql_client,
    google_project_iam_member.provider,
  ]
}
