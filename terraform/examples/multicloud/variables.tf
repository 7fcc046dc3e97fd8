# --- the control plane, on AWS ---

variable "region" {
  type        = string
  description = "AWS region of the control plane."
  default     = "us-east-1"
}

variable "name" {
  type        = string
  description = "Prefix for the control plane's resources on both clouds."
  default     = "headroom"
}

variable "cluster_id" {
  type        = string
  description = "Names this Headroom deployment: the headroom-cluster tag (AWS) and label (GCP) on every instance it launches, and the only instances it may touch."
  default     = "headroom-prod"

  # It is a GCP label value as well as an AWS tag value.
  validation {
    condition     = can(regex("^[a-z0-9_-]{1,63}$", var.cluster_id))
    error_message = "cluster_id: 1-63 lower-case letters, digits, '_' or '-' (it is a GCP label value too)."
  }
}

variable "image" {
  type        = string
  description = "Container image of headroom built with FEATURES=aws,gcp (push it to ECR first)."
}

variable "vpc_id" {
  type        = string
  description = "VPC for the control plane."
}

variable "private_subnet_ids" {
  type        = list(string)
  description = "Private subnets in two or more availability zones; they need a route to the AWS APIs and to *.googleapis.com (NAT gateway)."
}

variable "allowed_cidr_blocks" {
  type        = list(string)
  description = "Networks that may call the API."
}

variable "certificate_arn" {
  type        = string
  description = "ACM certificate for the API's HTTPS listener."
}

variable "api_domain_name" {
  type        = string
  description = "DNS name clients use for the API (covered by the certificate); null to use the load balancer's name."
  default     = null
}

variable "instance_role_arns" {
  type        = list(string)
  description = "Roles of the instance profiles the AWS GPU nodes' launch templates use."
  default     = []
}

variable "sqs_queue_arns" {
  type        = list(string)
  description = "SQS queues carrying spot interruption notices for the service."
  default     = []
}

# --- the AWS provider ([aws] in the configuration) ---

variable "regions" {
  type        = list(string)
  description = "Regions the AWS provider launches GPU instances in ([aws] regions in the configuration)."
  default     = ["us-east-1", "us-east-2"]
}

variable "launch_templates" {
  type = list(object({
    pool     = string
    template = string
  }))
  description = "The EC2 launch template (by name) each pool's AWS nodes start from: the AMI, instance profile and user data that join the Kubernetes cluster. Every pool with AWS offerings needs one."
  default = [
    { pool = "llama-70b-interactive", template = "headroom-llama-70b-interactive" },
  ]
}

# --- the GCP provider ([gcp] in the configuration) ---

variable "gcp_project" {
  type        = string
  description = "Project the GCP GPU instances are launched in ([gcp] project); the service account, its custom role and the workload identity pool are made there."
}

variable "gcp_zones" {
  type        = list(string)
  description = "Zones the GCP provider lists instances in besides the offerings' own ([gcp] zones)."
  default     = ["us-central1-a"]
}

variable "gcp_instance_template" {
  type        = string
  description = "Instance template the GCP GPU nodes are built from ([gcp] instance_template), e.g. \"global/instanceTemplates/headroom-gpu\": the node image, boot disk, network and service account that joins the cluster."
  validation {
    condition     = can(regex("^(projects/[^/]+/)?(global|regions/[^/]+)/instanceTemplates/[^/]+$", var.gcp_instance_template))
    error_message = "gcp_instance_template must be a template path such as global/instanceTemplates/NAME or projects/P/regions/R/instanceTemplates/NAME."
  }
}

variable "gcp_node_service_account_email" {
  type        = string
  description = "Service account the GCP GPU instances run as (the one in the instance template); the provider's account gets roles/iam.serviceAccountUser on it alone. Null: none."
  default     = null
}

# --- what Headroom plans with ---

variable "offerings" {
  type = list(object({
    id                 = string
    provider           = string
    region             = string
    zone               = string
    instance_type      = string
    market             = string
    price_usd_per_hour = string
    gpus               = number
  }))
  description = "What the planner may launch, on either cloud: provider (aws or gcp), region, zone (AWS zone id or GCE zone), instance or machine type, market, and the hourly price as a decimal string. Defaults: list prices from config/prices/ (the GCP one with its eight A100s attached)."
  default = [
    { id = "use1-p4d-od", provider = "aws", region = "us-east-1", zone = "use1-az1", instance_type = "p4d.24xlarge", market = "on-demand", price_usd_per_hour = "21.957642", gpus = 8 },
    { id = "use2-p4d-od", provider = "aws", region = "us-east-2", zone = "use2-az1", instance_type = "p4d.24xlarge", market = "on-demand", price_usd_per_hour = "21.95764", gpus = 8 },
    { id = "usc1a-a2-od", provider = "gcp", region = "us-central1", zone = "us-central1-a", instance_type = "a2-highgpu-8g", market = "on-demand", price_usd_per_hour = "29.3871", gpus = 8 },
  ]

  validation {
    condition     = alltrue([for o in var.offerings : contains(["aws", "gcp"], o.provider)])
    error_message = "offerings: provider is \"aws\" or \"gcp\" (the control plane holds credentials for these two)."
  }
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
  description = "GPU pools: the budget account charged, allowed offering ids in order of preference (the default pool tries both AWS regions, then falls back to GCP in the same tick), replica bounds, warm pool size, the throughput one replica sustains and the cold-start ladder estimates."
  default = [
    {
      name                   = "llama-70b-interactive"
      account                = "ml-platform"
      offerings              = ["use1-p4d-od", "use2-p4d-od", "usc1a-a2-od"]
      min_replicas           = 2
      max_replicas           = 8
      max_scale_up_per_step  = 4
      warm_pool_size         = 1
      replica_throughput_rps = 10
      ladder                 = { node_acquisition = "120s", image_pull = "85s", weight_load = "45s", compile = "20s", warmup = "5s" }
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
  description = "Money ceilings per account and period, one ledger for both clouds: a node counts against its account's budget whichever cloud it runs on."
  default = [
    { account = "ml-platform", period = "day", ceiling_usd = "6000", soft_threshold_percent = 80, hard_action = "refuse" },
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
