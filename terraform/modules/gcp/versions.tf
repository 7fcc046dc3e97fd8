terraform {
  required_version = ">= 1.5.0"

  required_providers {
    google = {
      source = "hashicorp/google"
      # 6.10+: invoker_iam_disabled and sidecar containers on google_cloud_run_v2_service.
      version = "~> 6.10"
    }
    # The migrate job only: run_execution_token (run the job and wait for it) is in beta.
    google-beta = {
      source  = "hashicorp/google-beta"
      version = "~> 6.10"
    }
    random = {
      source  = "hashicorp/random"
      version = "~> 3.6"
    }
  }
}
