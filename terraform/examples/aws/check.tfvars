# Not loaded by terraform (the name is not *.auto.tfvars): terraform/check.py renders the
# configuration template with these on top of the variables' defaults, so the webhook loop is
# checked too. Placeholder endpoints only.
alert_webhooks = [
  { url = "http://alertmanager.monitoring.internal:9093/api/v2/alerts", format = "alertmanager" },
  { url = "http://alert-relay.internal:8080/headroom", format = "json" },
]
