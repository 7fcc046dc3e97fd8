variable "project" {
  type        = string
  description = "Project for the control plane and the GPU instances ([gcp] project in the configuration)."
}

variable "instance_template" {
  type        = string
  description = "Instance template the GPU nodes are built from ([gcp] instance_template): the node image, boot disk, network and service account that joins the cluster, for example \"global/instanceTemplates/headroom-gpu\". Headroom only instantiates it."
  validation {
    condition     = can(regex("^(projects/[^/]+/)?(global|regions/[^/]+)/instanceTemplates/[^/]+$", var.instance_template))
    error_message = "instance_template must be a template path such as global/instanceTemplates/NAME or projects/P/regions/R/instanceTemplates/NAME."
  }
}

variable "region" {
  type        = string
  description = "Region of Cloud Run and Cloud SQL."
  default     = "us-central1"
}

variable "name" {
  type        = string
  description = "Prefix for the control plane's resources."
  default     = "headroom"
}

variable "cluster_id" {
  type        = string
  description = "Names this Headroom deployment: the headroom-cluster label on every instance it launches."
  default     = "headroom-prod"
}

variable "image" {
  type        = string
  description = "Container image of headroom built with FEATURES=gcp (in Artifact Registry)."
}

variable "network" {
  type        = string
  description = "VPC network id (projects/P/global/networks/N)."
}

variable "subnetwork" {
  type        = string
  description = "Subnetwork id in var.region for the service's VPC egress."
}

variable "node_service_account_email" {
  type        = string
  description = "Service account the GPU instances run as (null: none)."
  default     = null
}

variable "zones" {
  type        = list(string)
  description = "Zones the GCP provider launches GPU instances in ([gcp] zones in the configuration)."
  default     = ["us-central1-a", "us-central1-b"]
}

variable "offerings" {
  type = list(object({
    id                 = string
    region             = string
    zone               = string
    instance_type      = string
    market             = string
    price_usd_per_hour = string
    gpus               = number
  }))
  description = "What the planner may launch: (region, zone, machine type, market) and the hourly price as a decimal string. Default prices are the VM part from config/prices/; add the attached GPUs' price for your account."
  default = [
    { id = "usc1a-a2-spot", region = "us-central1", zone = "us-central1-a", instance_type = "a2-highgpu-1g", market = "spot", price_usd_per_hour = "0.36975", gpus = 1 },
    { id = "usc1b-a2-spot", region = "us-central1", zone = "us-central1-b", instance_type = "a2-highgpu-1g", market = "spot", price_usd_per_hour = "0.36975", gpus = 1 },
    { id = "usc1a-a2-od", region = "us-central1", zone = "us-central1-a", instance_type = "a2-highgpu-1g", market = "on-demand", price_usd_per_hour = "0.73948", gpus = 1 },
  ]
}

variable "pools" {
  type = list(object({
    name                   = string
    account                = string
    offerings              = list(string)
    min_replicas           = number
    max_replicas           = number
    max_scale_up_per_step  = number
    warm_pool_size         = number
    replica_throughput_rps = number
    ladder = object({
      node_acquisition = string
      image_pull       = string
      weight_load      = string
      compile          = string
      warmup           = string
    })
  }))
  description = "GPU pools, one per workload class: the budget account charged, allowed offering ids in order of preference, replica bounds, warm pool size, the throughput one replica sustains and the cold-start ladder estimates (durations like \"90s\")."
  default = [
    {
      name                   = "mistral-7b-interactive"
      account                = "ml-platform"
      offerings              = ["usc1a-a2-spot", "usc1b-a2-spot", "usc1a-a2-od"]
      min_replicas           = 2
      max_replicas           = 16
      max_scale_up_per_step  = 4
      warm_pool_size         = 2
      replica_throughput_rps = 5
      ladder                 = { node_acquisition = "60s", image_pull = "45s", weight_load = "60s", compile = "30s", warmup = "15s" }
    },
  ]
}

variable "budgets" {
  type = list(object({
    account                = string
    period                 = string
    ceiling_usd            = string
    soft_threshold_percent = number
    hard_action            = string
  }))
  description = "Money ceilings per account and period (hour, day, month), with the alert threshold and what happens past the ceiling (refuse, clamp, shed-lowest-tier)."
  default = [
    { account = "ml-platform", period = "day", ceiling_usd = "1000", soft_threshold_percent = 80, hard_action = "clamp" },
  ]
}

variable "alert_webhooks" {
  type = list(object({
    url    = string
    format = string
  }))
  description = "Where on-call alerts go: http:// URL and format (alertmanager, slack or json). The configuration is stored as a secret because these URLs can carry credentials."
  default     = []
  sensitive   = true
}
