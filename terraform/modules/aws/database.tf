# One customer-managed key for everything at rest: database, Performance Insights, secrets, logs.
resource "aws_kms_key" "this" {
  description             = "${var.name}: ledger database, secrets and logs"
  enable_key_rotation     = true
  deletion_window_in_days = 30
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        # Lets IAM policies in this account grant use of the key (RDS, Secrets Manager, roles).
        Sid       = "AccountAdministers"
        Effect    = "Allow"
        Principal = { AWS = "arn:${local.partition}:iam::${local.account}:root" }
        Action    = "kms:*"
        Resource  = "*"
      },
      {
        Sid       = "CloudWatchLogsEncrypts"
        Effect    = "Allow"
        Principal = { Service = "logs.${data.aws_region.current.region}.amazonaws.com" }
        Action    = ["kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"]
        Resource  = "*"
        Condition = {
          ArnLike = { "kms:EncryptionContext:aws:logs:arn" = "arn:${local.partition}:logs:${data.aws_region.current.region}:${local.account}:log-group:/headroom/${var.name}" }
        }
      },
    ]
  })
  tags = var.tags
}

resource "aws_kms_alias" "this" {
  name          = "alias/${var.name}"
  target_key_id = aws_kms_key.this.key_id
}

resource "aws_db_subnet_group" "this" {
  name       = var.name
  subnet_ids = var.private_subnet_ids
  tags       = var.tags
}

resource "aws_db_parameter_group" "this" {
  # A prefix, not a name: a new version is created before the old one is destroyed.
  name_prefix = "${var.name}-postgres${var.db_engine_version}-"
  family      = "postgres${var.db_engine_version}"

  parameter {
    name  = "rds.force_ssl"
    value = var.database_require_tls ? "1" : "0"
  }
  # Slow ledger queries (admissions take an advisory lock per account) show up in the logs.
  parameter {
    name  = "log_min_duration_statement"
    value = "500"
  }

  tags = var.tags

  lifecycle {
    create_before_destroy = true
  }
}

# Generated here and kept in Terraform state (the state must be protected like the database).
# No '@', ':' or '/' so they can sit in a postgres:// URL unescaped. Two roles: the master user
# owns the tables and only migrates (the `migrate` container); the runtime role the service
# runs as may SELECT and INSERT and nothing else, so it cannot rewrite the ledger or touch its
# append-only triggers. `headroom migrate --runtime-role` creates it with this password.
resource "random_password" "db" {
  length  = 40
  special = false
}

resource "random_password" "runtime" {
  length  = 40
  special = false
}

resource "aws_db_instance" "this" {
  identifier     = var.name
  engine         = "postgres"
  engine_version = var.db_engine_version
  instance_class = var.db_instance_class

  db_name  = "headroom"
  username = "headroom"
  password = random_password.db.result

  allocated_storage     = var.db_allocated_storage
  max_allocated_storage = var.db_max_allocated_storage
  storage_type          = "gp3"
  storage_encrypted     = true
  kms_key_id            = aws_kms_key.this.arn

  db_subnet_group_name   = aws_db_subnet_group.this.name
  vpc_security_group_ids = [aws_security_group.database.id]
  publicly_accessible    = false
  multi_az               = var.db_multi_az
  parameter_group_name   = aws_db_parameter_group.this.name

  backup_retention_period   = var.db_backup_retention_days
  copy_tags_to_snapshot     = true
  deletion_protection       = var.db_deletion_protection
  skip_final_snapshot       = false
  final_snapshot_identifier = "${var.name}-final"

  auto_minor_version_upgrade = true
  # The service logs in with the password above (it has no IAM token support); IAM
  # authentication is on so operators can use short-lived tokens instead of that password.
  iam_database_authentication_enabled = true

  enabled_cloudwatch_logs_exports       = ["postgresql", "upgrade"]
  performance_insights_enabled          = true
  performance_insights_kms_key_id       = aws_kms_key.this.arn
  performance_insights_retention_period = 7
  monitoring_interval                   = 60
  monitoring_role_arn                   = aws_iam_role.rds_monitoring.arn

  tags = var.tags
}

locals {
  # The role `serve` runs as; created and granted by `headroom migrate --runtime-role`.
  runtime_role        = "headroom_runtime"
  database_url_format = "postgres://%s:%s@%s:%d/%s%s"
  tls_query           = var.database_require_tls ? "?sslmode=require" : ""
  # The service's URL: the runtime role.
  database_url = format(
    local.database_url_format,
    local.runtime_role,
    random_password.runtime.result,
    aws_db_instance.this.address,
    aws_db_instance.this.port,
    aws_db_instance.this.db_name,
    local.tls_query,
  )
  # The owner's URL: the master user, for `headroom migrate` only.
  owner_database_url = format(
    local.database_url_format,
    aws_db_instance.this.username,
    random_password.db.result,
    aws_db_instance.this.address,
    aws_db_instance.this.port,
    aws_db_instance.this.db_name,
    local.tls_query,
  )
}

resource "aws_secretsmanager_secret" "database_url" {
  #checkov:skip=CKV2_AWS_57:The URL embeds the runtime role's password Terraform sets; rotate by replacing random_password.runtime and applying (the migrate container sets the new password before serve starts).
  name                    = "${var.name}/database-url"
  description             = "HEADROOM_DATABASE_URL for the headroom service: the runtime role (SELECT and INSERT only), with its password."
  kms_key_id              = aws_kms_key.this.arn
  recovery_window_in_days = 7
  tags                    = var.tags
}

resource "aws_secretsmanager_secret_version" "database_url" {
  secret_id     = aws_secretsmanager_secret.database_url.id
  secret_string = local.database_url
}

resource "aws_secretsmanager_secret" "owner_database_url" {
  #checkov:skip=CKV2_AWS_57:The URL embeds the RDS master password Terraform sets; rotate by replacing random_password.db and applying (a rotation Lambda would have to rewrite both).
  name                    = "${var.name}/owner-database-url"
  description             = "HEADROOM_DATABASE_URL for `headroom migrate`: the master user, which owns the ledger's tables. Only the migrate container gets it."
  kms_key_id              = aws_kms_key.this.arn
  recovery_window_in_days = 7
  tags                    = var.tags
}

resource "aws_secretsmanager_secret_version" "owner_database_url" {
  secret_id     = aws_secretsmanager_secret.owner_database_url.id
  secret_string = local.owner_database_url
}

resource "aws_secretsmanager_secret" "runtime_password" {
  #checkov:skip=CKV2_AWS_57:The runtime role's password, set by `headroom migrate` from this secret; rotate by replacing random_password.runtime and applying.
  name                    = "${var.name}/runtime-password"
  description             = "HEADROOM_RUNTIME_PASSWORD for `headroom migrate --runtime-role`: the password it gives the runtime role."
  kms_key_id              = aws_kms_key.this.arn
  recovery_window_in_days = 7
  tags                    = var.tags
}

resource "aws_secretsmanager_secret_version" "runtime_password" {
  secret_id     = aws_secretsmanager_secret.runtime_password.id
  secret_string = random_password.runtime.result
}

resource "aws_secretsmanager_secret" "config" {
  #checkov:skip=CKV2_AWS_57:Configuration, not a credential that expires; it changes with terraform apply.
  name                    = "${var.name}/config"
  description             = "The headroom configuration file (TOML); alert webhook URLs in it can be credentials."
  kms_key_id              = aws_kms_key.this.arn
  recovery_window_in_days = 7
  tags                    = var.tags
}

resource "aws_secretsmanager_secret_version" "config" {
  secret_id     = aws_secretsmanager_secret.config.id
  secret_string = var.config_toml
}

# API tokens are minted by the service (`headroom token create`, which keeps only their hash in
# the ledger), so Terraform creates the place to keep the first admin token, not its value.
resource "aws_secretsmanager_secret" "api_token" {
  #checkov:skip=CKV2_AWS_57:The value is a Headroom API token minted by `headroom token create`; it is rotated by minting a new one and revoking the old, which no rotation Lambda can do.
  name                    = "${var.name}/admin-api-token"
  description             = "Bootstrap admin bearer token for the Headroom API; store it after `headroom token create` (see the module README)."
  kms_key_id              = aws_kms_key.this.arn
  recovery_window_in_days = 7
  tags                    = var.tags
}
