variable "region" {
  type        = string
  description = "AWS region of the control plane."
  default     = "us-east-1"
}

variable "name" {
  type        = string
  description = "Prefix for the control plane's resources."
  default     = "headroom"
}

variable "cluster_id" {
  type        = string
  description = "Names this Headroom deployment: the headroom-cluster tag on every instance it launches, and the only instances it may touch."
  default     = "headroom-prod"
}

variable "image" {
  type        = string
  description = "Container image of headroom built with FEATURES=aws (push it to ECR first)."
}

variable "vpc_id" {
  type        = string
  description = "VPC for the control plane."
}

variable "private_subnet_ids" {
  type        = list(string)
  description = "Private subnets in two or more availability zones."
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
  description = "Roles of the instance profiles the GPU nodes' launch templates use."
  default     = []
}

variable "sqs_queue_arns" {
  type        = list(string)
  description = "SQS queues carrying spot interruption notices for the service."
  default     = []
}

variable "regions" {
  type        = list(string)
  description = "Regions the AWS provider launches GPU instances in ([aws] regions in the configuration)."
  default     = ["us-east-1"]
}

variable "launch_templates" {
  type = list(object({
    pool     = string
    template = string
  }))
  description = "The EC2 launch template (by name) each pool's nodes start from: the AMI, instance profile and user data that join the Kubernetes cluster. Every pool needs one; create them beside the node group."
  default = [
    { pool = "llama-70b-interactive", template = "headroom-llama-70b-interactive" },
    { pool = "mistral-7b-batch", template = "headroom-mistral-7b-batch" },
  ]
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
  description = "What the planner may launch: (region, zone, instance type, market) and the hourly price as a decimal string. Defaults are list and spot prices from config/prices/."
  default = [
    { id = "use1-p4d-od", region = "us-east-1", zone = "use1-az1", instance_type = "p4d.24xlarge", market = "on-demand", price_usd_per_hour = "21.957642", gpus = 8 },
    { id = "use1-g6-spot", region = "us-east-1", zone = "use1-az4", instance_type = "g6.xlarge", market = "spot", price_usd_per_hour = "0.349", gpus = 1 },
    { id = "use1-g6-od", region = "us-east-1", zone = "use1-az1", instance_type = "g6.xlarge", market = "on-demand", price_usd_per_hour = "0.8048", gpus = 1 },
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
      name                   = "llama-70b-interactive"
      account                = "ml-platform"
      offerings              = ["use1-p4d-od"]
      min_replicas           = 2
      max_replicas           = 8
      max_scale_up_per_step  = 4
      warm_pool_size         = 1
      replica_throughput_rps = 10
      ladder                 = { node_acquisition = "90s", image_pull = "60s", weight_load = "45s", compile = "20s", warmup = "5s" }
    },
    {
      name                   = "mistral-7b-batch"
      account                = "research"
      offerings              = ["use1-g6-spot", "use1-g6-od"]
      min_replicas           = 1
      max_replicas           = 12
      max_scale_up_per_step  = 4
      warm_pool_size         = 1
      replica_throughput_rps = 5
      ladder                 = { node_acquisition = "60s", image_pull = "45s", weight_load = "90s", compile = "30s", warmup = "15s" }
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
    { account = "ml-platform", period = "day", ceiling_usd = "5000", soft_threshold_percent = 80, hard_action = "refuse" },
    { account = "research", period = "day", ceiling_usd = "500", soft_threshold_percent = 80, hard_action = "clamp" },
  ]
}

variable "alert_webhooks" {
  type = list(object({
    url    = string
    format = string
  }))
  description = "Where on-call alerts go: URL and format (alertmanager, slack or json). The configuration is stored as a secret because these URLs can carry credentials."
  default     = []
  sensitive   = true
}
