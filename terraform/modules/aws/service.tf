locals {
  container_port = 8080
  # The service reads its configuration from a file (`serve --config FILE`); ECS cannot mount a
  # secret as a file, so the container writes HEADROOM_CONFIG to a scratch volume first.
  config_path = "/run/headroom/headroom.toml"
  api_host    = coalesce(var.api_domain_name, aws_lb.this.dns_name)
  # With GCP offerings: the external-account credential configuration, written beside the
  # configuration and named by GOOGLE_APPLICATION_CREDENTIALS. It holds no secret, so it travels
  # as a plain environment variable of the task definition.
  google_credentials_path = "/run/headroom/google-credentials.json"
  write_google_credentials = var.google_credential_config == null ? "" : (
    "printf '%s' \"$HEADROOM_GOOGLE_CREDENTIAL_CONFIG\" > ${local.google_credentials_path} && "
  )
  google_environment = var.google_credential_config == null ? [] : [
    { name = "HEADROOM_GOOGLE_CREDENTIAL_CONFIG", value = var.google_credential_config },
    { name = "GOOGLE_APPLICATION_CREDENTIALS", value = local.google_credentials_path },
  ]
}

# --- network: clients -> ALB (443) -> tasks (8080) -> database (5432) ---

resource "aws_security_group" "alb" {
  name        = "${var.name}-alb"
  description = "Headroom internal load balancer"
  vpc_id      = var.vpc_id
  tags        = var.tags
}

resource "aws_security_group" "tasks" {
  name        = "${var.name}-tasks"
  description = "Headroom service tasks"
  vpc_id      = var.vpc_id
  tags        = var.tags
}

resource "aws_security_group" "database" {
  name        = "${var.name}-database"
  description = "Headroom ledger database"
  vpc_id      = var.vpc_id
  tags        = var.tags
}

resource "aws_vpc_security_group_ingress_rule" "alb_from_clients" {
  for_each          = toset(var.allowed_cidr_blocks)
  security_group_id = aws_security_group.alb.id
  description       = "HTTPS from networks allowed to call the API"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = each.value
}

resource "aws_vpc_security_group_egress_rule" "alb_to_tasks" {
  security_group_id            = aws_security_group.alb.id
  description                  = "To the service tasks"
  ip_protocol                  = "tcp"
  from_port                    = local.container_port
  to_port                      = local.container_port
  referenced_security_group_id = aws_security_group.tasks.id
}

resource "aws_vpc_security_group_ingress_rule" "tasks_from_alb" {
  security_group_id            = aws_security_group.tasks.id
  description                  = "API and health checks from the load balancer"
  ip_protocol                  = "tcp"
  from_port                    = local.container_port
  to_port                      = local.container_port
  referenced_security_group_id = aws_security_group.alb.id
}

resource "aws_vpc_security_group_egress_rule" "tasks_to_database" {
  security_group_id            = aws_security_group.tasks.id
  description                  = "PostgreSQL ledger"
  ip_protocol                  = "tcp"
  from_port                    = 5432
  to_port                      = 5432
  referenced_security_group_id = aws_security_group.database.id
}

resource "aws_vpc_security_group_egress_rule" "tasks_to_https" {
  security_group_id = aws_security_group.tasks.id
  description       = "AWS APIs (EC2, Auto Scaling, SQS, Secrets Manager, ECR, Logs) and HTTPS alert webhooks"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = "0.0.0.0/0"
}

resource "aws_vpc_security_group_egress_rule" "tasks_to_webhooks" {
  for_each = {
    for pair in flatten([
      for rule in var.alert_egress : [for cidr in rule.cidr_blocks : { key = "${rule.port}-${cidr}", port = rule.port, cidr = cidr, description = rule.description }]
    ]) : pair.key => pair
  }
  security_group_id = aws_security_group.tasks.id
  description       = each.value.description
  ip_protocol       = "tcp"
  from_port         = each.value.port
  to_port           = each.value.port
  cidr_ipv4         = each.value.cidr
}

resource "aws_vpc_security_group_ingress_rule" "database_from_tasks" {
  security_group_id            = aws_security_group.database.id
  description                  = "PostgreSQL from the service tasks only"
  ip_protocol                  = "tcp"
  from_port                    = 5432
  to_port                      = 5432
  referenced_security_group_id = aws_security_group.tasks.id
}

# --- internal load balancer ---

resource "aws_lb" "this" {
  #checkov:skip=CKV2_AWS_28:Internal load balancer reachable only from allowed_cidr_blocks; every API call needs a bearer token. Attach a WAF web ACL outside this module if your policy requires one.
  #checkov:skip=CKV_AWS_91:Access logs need an S3 bucket with an ELB delivery policy, which belongs to the platform's logging account; set alb_access_logs_bucket to turn them on.
  name                       = var.name
  internal                   = true
  load_balancer_type         = "application"
  security_groups            = [aws_security_group.alb.id]
  subnets                    = var.private_subnet_ids
  drop_invalid_header_fields = true
  enable_deletion_protection = var.db_deletion_protection

  dynamic "access_logs" {
    for_each = var.alb_access_logs_bucket == null ? [] : [var.alb_access_logs_bucket]
    content {
      bucket  = access_logs.value
      prefix  = var.name
      enabled = true
    }
  }

  tags = var.tags
}

resource "aws_lb_target_group" "this" {
  name                 = var.name
  port                 = local.container_port
  protocol             = "HTTP"
  target_type          = "ip"
  vpc_id               = var.vpc_id
  deregistration_delay = 30

  # /readyz answers 200 only while the ledger answers; /healthz would keep a task whose
  # database connection is gone in service.
  health_check {
    path                = "/readyz"
    matcher             = "200"
    interval            = 15
    timeout             = 5
    healthy_threshold   = 2
    unhealthy_threshold = 3
  }

  tags = var.tags
}

resource "aws_lb_listener" "https" {
  load_balancer_arn = aws_lb.this.arn
  port              = 443
  protocol          = "HTTPS"
  ssl_policy        = "ELBSecurityPolicy-TLS13-1-2-2021-06"
  certificate_arn   = var.certificate_arn

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.this.arn
  }

  tags = var.tags
}

# --- the service ---

resource "aws_cloudwatch_log_group" "this" {
  name              = "/headroom/${var.name}"
  retention_in_days = var.log_retention_days
  kms_key_id        = aws_kms_key.this.arn
  tags              = var.tags
}

resource "aws_ecs_cluster" "this" {
  name = var.name

  setting {
    name  = "containerInsights"
    value = "enabled"
  }

  tags = var.tags
}

resource "aws_ecs_task_definition" "this" {
  family                   = var.name
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = var.cpu
  memory                   = var.memory
  execution_role_arn       = aws_iam_role.execution.arn
  task_role_arn            = aws_iam_role.task.arn

  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = "X86_64"
  }

  # Task-local scratch space: the root filesystem is read-only.
  volume {
    name = "run"
  }

  container_definitions = jsonencode([{
    # Runs to completion before the service starts, in every task: migrates as the owner (the master
    # user) and leaves the runtime role SELECT and INSERT only (and DELETE of the engine's memory
    # past its retention). Idempotent; concurrent runs from several tasks serialise in the database.
    # The owner's URL reaches this container only, never the service's.
    name      = "migrate"
    image     = var.image
    essential = false
    command   = ["migrate", "--runtime-role", local.runtime_role]
    secrets = [
      { name = "HEADROOM_DATABASE_URL", valueFrom = aws_secretsmanager_secret.owner_database_url.arn },
      { name = "HEADROOM_RUNTIME_PASSWORD", valueFrom = aws_secretsmanager_secret.runtime_password.arn },
    ]
    readonlyRootFilesystem = true
    logConfiguration = {
      logDriver = "awslogs"
      options = {
        "awslogs-group"         = aws_cloudwatch_log_group.this.name
        "awslogs-region"        = data.aws_region.current.region
        "awslogs-stream-prefix" = "migrate"
      }
    }
    }, {
    name      = "headroom"
    image     = var.image
    essential = true
    # Only once the schema is current and the runtime role granted.
    dependsOn = [{ containerName = "migrate", condition = "SUCCESS" }]
    # printf, not echo: the TOML is written byte for byte. exec: SIGTERM reaches headroom,
    # which stops taking requests and finishes its tick.
    entryPoint = ["/bin/sh", "-c"]
    command = [
      "${local.write_google_credentials}printf '%s' \"$HEADROOM_CONFIG\" > ${local.config_path} && exec headroom serve --config ${local.config_path} --listen 0.0.0.0:${local.container_port}"
    ]
    portMappings = [{ containerPort = local.container_port, protocol = "tcp" }]
    # The runtime role's URL: it can add ledger rows, not rewrite them or change the schema.
    secrets = [
      { name = "HEADROOM_DATABASE_URL", valueFrom = aws_secretsmanager_secret.database_url.arn },
      { name = "HEADROOM_CONFIG", valueFrom = aws_secretsmanager_secret.config.arn },
    ]
    # AWS_REGION also tells the GCP credentials which regional STS endpoint to sign for.
    environment = concat([
      { name = "AWS_REGION", value = data.aws_region.current.region },
    ], local.google_environment)
    readonlyRootFilesystem = true
    mountPoints            = [{ sourceVolume = "run", containerPath = "/run/headroom", readOnly = false }]
    stopTimeout            = 60
    logConfiguration = {
      logDriver = "awslogs"
      options = {
        "awslogs-group"         = aws_cloudwatch_log_group.this.name
        "awslogs-region"        = data.aws_region.current.region
        "awslogs-stream-prefix" = "headroom"
      }
    }
  }])

  tags = var.tags

  depends_on = [
    aws_secretsmanager_secret_version.database_url,
    aws_secretsmanager_secret_version.config,
    aws_secretsmanager_secret_version.owner_database_url,
    aws_secretsmanager_secret_version.runtime_password,
  ]
}

resource "aws_ecs_service" "this" {
  name                              = var.name
  cluster                           = aws_ecs_cluster.this.id
  task_definition                   = aws_ecs_task_definition.this.arn
  desired_count                     = var.desired_count
  launch_type                       = "FARGATE"
  health_check_grace_period_seconds = 60
  propagate_tags                    = "SERVICE"
  # Replace one task at a time at most: half the replicas keep serving during a deploy.
  deployment_minimum_healthy_percent = 50
  deployment_maximum_percent         = 200

  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }

  network_configuration {
    subnets          = var.private_subnet_ids
    security_groups  = [aws_security_group.tasks.id]
    assign_public_ip = false
  }

  load_balancer {
    target_group_arn = aws_lb_target_group.this.arn
    container_name   = "headroom"
    container_port   = local.container_port
  }

  tags = var.tags

  depends_on = [aws_lb_listener.https, aws_iam_role_policy.provider]
}
