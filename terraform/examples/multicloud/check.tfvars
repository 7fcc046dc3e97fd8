# Not loaded by terraform (the name is not *.auto.tfvars): terraform/check.py renders the
# configuration template with these on top of the variables' defaults, so the required project
# and template and the webhook loop are checked too. Placeholder values only.
gcp_project           = "example-gpu-project"
gcp_instance_template = "global/instanceTemplates/headroom-gpu"
alert_webhooks = [
  { url = "http://alertmanager.monitoring.internal:9093/api/v2/alerts", format = "alertmanager" },
  { url = "http://alert-relay.internal:8080/headroom", format = "json" },
]
