data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}
data "aws_region" "current" {}

locals {
  account   = data.aws_caller_identity.current.account_id
  partition = data.aws_partition.current.partition

  # The one list of AWS calls the provider makes, kept beside its code (a test there keeps it
  # equal to the calls).
  actions_file = "${path.module}/../../../crates/headroom-aws/iam-actions.txt"
  provider_actions = toset([
    for line in split("\n", file(local.actions_file)) :
    trimspace(line) if trimspace(line) != "" && !startswith(trimspace(line), "#")
  ])

  # Which policy statement each provider action belongs to, i.e. how far it can be scoped.
  # Every action in iam-actions.txt must be in exactly one list (a precondition below and
  # terraform/check.py enforce it); a new action is granted only once someone places it here.
  action_classes = {
    # No resource-level permissions or tag conditions exist for these reads: Resource "*".
    read = [
      "autoscaling:DescribeAutoScalingGroups",
      "autoscaling:DescribeWarmPool",
      "ec2:DescribeImages",
      "ec2:DescribeInstanceStatus",
      "ec2:DescribeInstanceTypeOfferings",
      "ec2:DescribeInstanceTypes",
      "ec2:DescribeInstances",
      "ec2:DescribeLaunchTemplateVersions",
      "ec2:DescribeSpotPriceHistory",
      "ec2:DescribeSubnets",
      "servicequotas:GetAWSDefaultServiceQuota",
      "servicequotas:GetServiceQuota",
    ]
    # Existing instances (and their spot requests, tagged at launch): only those tagged with
    # this deployment's cluster id.
    owned_instances = [
      "ec2:CancelSpotInstanceRequests",
      "ec2:RebootInstances",
      "ec2:StartInstances",
      "ec2:StopInstances",
      "ec2:TerminateInstances",
    ]
    # Launches: the new instance must carry the cluster tag in the request (TagSpecifications).
    launch = [
      "ec2:CreateFleet",
      "ec2:RunInstances",
    ]
    # Tagging: at launch (CreateAction condition) or on instances already ours.
    tag = [
      "ec2:CreateTags",
    ]
    # Auto Scaling groups tagged with this deployment's cluster id (group mode: the group
    # propagates that tag to its instances, which Headroom then claims with ec2:CreateTags).
    owned_asgs = [
      "autoscaling:PutWarmPool",
      "autoscaling:SetDesiredCapacity",
      "autoscaling:TerminateInstanceInAutoScalingGroup",
    ]
    # Interruption / state-change queues named in sqs_queue_arns.
    queues = [
      "sqs:ChangeMessageVisibility",
      "sqs:DeleteMessage",
      "sqs:GetQueueAttributes",
      "sqs:ReceiveMessage",
    ]
    # Instance profile roles, to EC2 only.
    pass_role = [
      "iam:PassRole",
    ]
  }

  # The provider's actions, split by statement; only actions from the file are ever granted.
  granted = {
    for class, actions in local.action_classes :
    class => sort([for a in local.provider_actions : a if contains(actions, a)])
  }
  unclassified_actions = setsubtract(local.provider_actions, flatten(values(local.action_classes)))

  cluster_tag = "headroom-cluster"

  instance_role_arns = length(var.instance_role_arns) > 0 ? var.instance_role_arns : ["arn:${local.partition}:iam::${local.account}:role/${var.name}-node-*"]
  sqs_queue_arns     = length(var.sqs_queue_arns) > 0 ? var.sqs_queue_arns : ["arn:${local.partition}:sqs:*:${local.account}:${var.name}-*"]

  # Statements with no action in the file are left out (IAM rejects an empty Action).
  provider_statements = [for s in [
    {
      Sid      = "Read"
      Effect   = "Allow"
      Action   = local.granted["read"]
      Resource = "*"
    },
    {
      Sid      = "OwnedInstances"
      Effect   = "Allow"
      Action   = local.granted["owned_instances"]
      Resource = ["arn:${local.partition}:ec2:*:${local.account}:instance/*", "arn:${local.partition}:ec2:*:${local.account}:spot-instances-request/*"]
      Condition = {
        StringEquals = { "aws:ResourceTag/${local.cluster_tag}" = var.cluster_id }
      }
    },
    {
      Sid      = "LaunchTaggedInstances"
      Effect   = "Allow"
      Action   = local.granted["launch"]
      Resource = "arn:${local.partition}:ec2:*:${local.account}:instance/*"
      Condition = {
        StringEquals = { "aws:RequestTag/${local.cluster_tag}" = var.cluster_id }
      }
    },
    {
      # Everything else a launch names or creates alongside the instance (its volumes, the
      # fleet, the spot request); none of it exists without a tagged instance.
      Sid    = "LaunchFromTemplates"
      Effect = "Allow"
      Action = local.granted["launch"]
      Resource = [
        "arn:${local.partition}:ec2:*::image/*",
        "arn:${local.partition}:ec2:*::snapshot/*",
        "arn:${local.partition}:ec2:*:${local.account}:launch-template/*",
        "arn:${local.partition}:ec2:*:${local.account}:subnet/*",
        "arn:${local.partition}:ec2:*:${local.account}:network-interface/*",
        "arn:${local.partition}:ec2:*:${local.account}:security-group/*",
        "arn:${local.partition}:ec2:*:${local.account}:key-pair/*",
        "arn:${local.partition}:ec2:*:${local.account}:placement-group/*",
        "arn:${local.partition}:ec2:*:${local.account}:capacity-reservation/*",
        "arn:${local.partition}:ec2:*:${local.account}:spot-instances-request/*",
        "arn:${local.partition}:ec2:*:${local.account}:volume/*",
        "arn:${local.partition}:ec2:*:${local.account}:fleet/*",
      ]
    },
    {
      Sid      = "TagAtLaunch"
      Effect   = "Allow"
      Action   = local.granted["tag"]
      Resource = ["arn:${local.partition}:ec2:*:${local.account}:instance/*", "arn:${local.partition}:ec2:*:${local.account}:volume/*", "arn:${local.partition}:ec2:*:${local.account}:fleet/*", "arn:${local.partition}:ec2:*:${local.account}:spot-instances-request/*"]
      Condition = {
        StringEquals = { "ec2:CreateAction" = ["RunInstances", "CreateFleet"] }
      }
    },
    {
      Sid      = "TagOwnedInstances"
      Effect   = "Allow"
      Action   = local.granted["tag"]
      Resource = "arn:${local.partition}:ec2:*:${local.account}:instance/*"
      Condition = {
        StringEquals = { "aws:ResourceTag/${local.cluster_tag}" = var.cluster_id }
        # The cluster tag itself cannot be rewritten to adopt someone else's instance.
        "ForAllValues:StringNotEquals" = { "aws:TagKeys" = [local.cluster_tag] }
      }
    },
    {
      Sid      = "OwnedAutoScalingGroups"
      Effect   = "Allow"
      Action   = local.granted["owned_asgs"]
      Resource = "arn:${local.partition}:autoscaling:*:${local.account}:autoScalingGroup:*:autoScalingGroupName/*"
      Condition = {
        StringEquals = { "aws:ResourceTag/${local.cluster_tag}" = var.cluster_id }
      }
    },
    {
      Sid      = "EventQueues"
      Effect   = "Allow"
      Action   = local.granted["queues"]
      Resource = local.sqs_queue_arns
    },
    {
      Sid      = "PassInstanceRole"
      Effect   = "Allow"
      Action   = local.granted["pass_role"]
      Resource = local.instance_role_arns
      Condition = {
        StringEquals = { "iam:PassedToService" = "ec2.${local.partition == "aws-cn" ? "amazonaws.com.cn" : "amazonaws.com"}" }
      }
    },
  ] : s if length(s.Action) > 0]
}

# The service's own identity: what the headroom process may do in AWS.
resource "aws_iam_role" "task" {
  name = "${var.name}-task"
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Principal = { Service = "ecs-tasks.amazonaws.com" }
      Action    = "sts:AssumeRole"
      Condition = {
        ArnLike      = { "aws:SourceArn" = "arn:${local.partition}:ecs:${data.aws_region.current.region}:${local.account}:*" }
        StringEquals = { "aws:SourceAccount" = local.account }
      }
    }]
  })
  tags = var.tags
}

resource "aws_iam_role_policy" "provider" {
  name   = "${var.name}-cloud-provider"
  role   = aws_iam_role.task.id
  policy = jsonencode({ Version = "2012-10-17", Statement = local.provider_statements })

  lifecycle {
    precondition {
      condition     = length(local.unclassified_actions) == 0
      error_message = "crates/headroom-aws/iam-actions.txt names actions no policy statement covers: ${join(", ", local.unclassified_actions)}. Add each to the right list in local.action_classes (modules/aws/iam.tf)."
    }
  }
}

# ECS's identity for starting the task: pull the image, read its secrets, write its logs.
resource "aws_iam_role" "execution" {
  name = "${var.name}-execution"
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Principal = { Service = "ecs-tasks.amazonaws.com" }
      Action    = "sts:AssumeRole"
      Condition = { StringEquals = { "aws:SourceAccount" = local.account } }
    }]
  })
  tags = var.tags
}

resource "aws_iam_role_policy_attachment" "execution" {
  role       = aws_iam_role.execution.name
  policy_arn = "arn:${local.partition}:iam::aws:policy/service-role/AmazonECSTaskExecutionRolePolicy"
}

resource "aws_iam_role_policy" "execution_secrets" {
  name = "${var.name}-secrets"
  role = aws_iam_role.execution.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Effect = "Allow"
        Action = ["secretsmanager:GetSecretValue"]
        # The owner URL and the runtime password go to the migrate container only; the task
        # role (what the running service can call) reads no secret.
        Resource = [
          aws_secretsmanager_secret.database_url.arn,
          aws_secretsmanager_secret.config.arn,
          aws_secretsmanager_secret.owner_database_url.arn,
          aws_secretsmanager_secret.runtime_password.arn,
        ]
      },
      {
        Effect   = "Allow"
        Action   = ["kms:Decrypt"]
        Resource = [aws_kms_key.this.arn]
      },
    ]
  })
}

# Enhanced monitoring for the database.
resource "aws_iam_role" "rds_monitoring" {
  name = "${var.name}-rds-monitoring"
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Principal = { Service = "monitoring.rds.amazonaws.com" }
      Action    = "sts:AssumeRole"
    }]
  })
  tags = var.tags
}

resource "aws_iam_role_policy_attachment" "rds_monitoring" {
  role       = aws_iam_role.rds_monitoring.name
  policy_arn = "arn:${local.partition}:iam::aws:policy/service-role/AmazonRDSEnhancedMonitoringRole"
}
