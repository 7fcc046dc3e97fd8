terraform {
  required_version = ">= 1.5.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 6.0"
    }
    google = {
      source  = "hashicorp/google"
      version = "~> 6.10"
    }
    random = {
      source  = "hashicorp/random"
      version = "~> 3.6"
    }
  }
}

# The control plane's cloud.
provider "aws" {
  region = var.region
}

# The other cloud: only an IAM footprint is made there (custom role, service account, workload
# identity pool); run Terraform as someone allowed to create those in gcp_project.
provider "google" {
  project = var.gcp_project
}
