output "api_url" {
  description = "Base URL of the Headroom API on the internal load balancer (HTTPS)."
  value       = "https://${local.api_host}"
}

output "load_balancer_dns_name" {
  description = "DNS name of the internal load balancer, for the record api_domain_name points at it."
  value       = aws_lb.this.dns_name
}

output "database_endpoint" {
  description = "host:port of the PostgreSQL ledger."
  value       = aws_db_instance.this.endpoint
}

output "database_url_secret_arn" {
  description = "Secrets Manager secret holding the service's HEADROOM_DATABASE_URL: the runtime role (SELECT and INSERT; DELETE of the engine's memory past its retention only), enough for `headroom token create` and reports."
  value       = aws_secretsmanager_secret.database_url.arn
}

output "owner_database_url_secret_arn" {
  description = "Secrets Manager secret holding the owner's (master user's) URL, for `headroom migrate` only; the migrate container of every task reads it."
  value       = aws_secretsmanager_secret.owner_database_url.arn
}

output "runtime_role" {
  description = "PostgreSQL role the service runs as (created and granted by `headroom migrate --runtime-role`)."
  value       = local.runtime_role
}

output "admin_token_secret_arn" {
  description = "Secrets Manager secret to keep the bootstrap admin API token in."
  value       = aws_secretsmanager_secret.api_token.arn
}

output "task_role_arn" {
  description = "IAM role the service runs as (its cloud provider permissions)."
  value       = aws_iam_role.task.arn
}

output "granted_actions" {
  description = "The provider's IAM actions from crates/headroom-aws/iam-actions.txt, by policy statement."
  value       = local.granted
}

output "ecs_cluster_name" {
  description = "ECS cluster running the service."
  value       = aws_ecs_cluster.this.name
}

output "ecs_service_name" {
  description = "ECS service name."
  value       = aws_ecs_service.this.name
}

output "task_definition_arn" {
  description = "Task definition, for one-off `headroom token create` tasks."
  value       = aws_ecs_task_definition.this.arn
}

output "tasks_security_group_id" {
  description = "Security group of the service tasks (for one-off tasks that need the database)."
  value       = aws_security_group.tasks.id
}

output "log_group_name" {
  description = "CloudWatch log group of the service."
  value       = aws_cloudwatch_log_group.this.name
}
