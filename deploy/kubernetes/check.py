#!/usr/bin/env python3
"""Renders deploy/kubernetes with `kubectl kustomize`, validates every object against the
Kubernetes schemas (kubernetes-validate, strict), and checks the manifests against the binary
they deploy: every flag the Deployment passes is one `headroom serve` takes, the configuration
the ConfigMap carries passes `headroom config check`, the probes ask the health endpoints, the
Service targets ports the container names, and the pod runs as the restricted profile asks.

The monitoring component (deploy/kubernetes/monitoring: ServiceMonitor, PrometheusRule, the
Grafana dashboard's ConfigMap) is rendered too, in an overlay of the base. kubernetes-validate has no schemas for the
Prometheus Operator's resources, so they are checked here: the ServiceMonitor scrapes the
Service's http port at /metrics with a token, and the PrometheusRule carries exactly the groups
of deploy/prometheus/rules.yml (`--write-prometheusrule` regenerates it from them).

Usage: check.py --headroom PATH_TO_BINARY [--kubernetes-version 1.32.0]
       check.py --write-prometheusrule
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
MONITORING = os.path.join(HERE, "monitoring")
RULES = os.path.join(HERE, "..", "prometheus", "rules.yml")
DASHBOARD = os.path.join(HERE, "..", "grafana", "headroom.json")
PROMETHEUS_RULE = os.path.join(MONITORING, "prometheusrule.yaml")
OPERATOR_GROUP = "monitoring.coreos.com/v1"


def prometheus_rule():
    """The PrometheusRule object that carries rules.yml's groups."""
    with open(RULES) as f:
        groups = yaml.safe_load(f)["groups"]
    return {
        "apiVersion": OPERATOR_GROUP,
        "kind": "PrometheusRule",
        "metadata": {
            "name": "headroom",
            "labels": {"app.kubernetes.io/name": "headroom", "app.kubernetes.io/part-of": "headroom"},
        },
        "spec": {"groups": groups},
    }


def render(path):
    return subprocess.run(
        ["kubectl", "kustomize", "--load-restrictor", "LoadRestrictionsNone", path],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def fail(message):
    print(f"FAIL {message}", file=sys.stderr)
    sys.exit(1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--headroom")
    parser.add_argument("--kubernetes-version", default="1.32.0")
    parser.add_argument("--write-prometheusrule", action="store_true")
    args = parser.parse_args()
    if args.write_prometheusrule:
        with open(PROMETHEUS_RULE, "w") as f:
            f.write("# Generated from deploy/prometheus/rules.yml by `deploy/kubernetes/check.py --write-prometheusrule`.\n")
            yaml.safe_dump(prometheus_rule(), f, sort_keys=False, width=100)
        print(f"wrote {PROMETHEUS_RULE}")
        return
    if not args.headroom:
        parser.error("--headroom PATH_TO_BINARY is required")

    rendered = render(HERE)
    # The monitoring component in an overlay of the base, as an operator would add it.
    with tempfile.TemporaryDirectory() as overlay:
        with open(os.path.join(overlay, "kustomization.yaml"), "w") as f:
            yaml.safe_dump({
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(HERE, overlay)],
                "components": [os.path.relpath(MONITORING, overlay)],
            }, f)
        monitoring = [o for o in yaml.safe_load_all(render(overlay)) if o]
    base_names = {(o["kind"], o["metadata"]["name"]) for o in yaml.safe_load_all(rendered) if o}
    added = [o for o in monitoring if (o["kind"], o["metadata"]["name"]) not in base_names]
    # The Kubernetes objects the monitoring variant adds (the dashboard's ConfigMap) are
    # schema-checked with the base; the operator's own kinds are checked below.
    rendered += "".join("---\n" + yaml.safe_dump(o) for o in added if o["apiVersion"] != OPERATOR_GROUP)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "headroom.yaml")
        with open(path, "w") as f:
            f.write(rendered)
        validate = subprocess.run(
            [
                os.path.join(os.path.dirname(sys.executable), "kubernetes-validate"),
                "--strict",
                "--quiet",
                "-k",
                args.kubernetes_version,
                path,
            ],
            capture_output=True,
            text=True,
        )
        if validate.returncode != 0:
            fail(f"kubernetes-validate:\n{validate.stdout}{validate.stderr}")
        objects = [o for o in yaml.safe_load_all(rendered) if o]
        kinds = sorted(f"{o['kind']}/{o['metadata']['name']}" for o in objects)
        print(f"ok   schemas: {len(objects)} objects valid against Kubernetes {args.kubernetes_version} (strict): {', '.join(kinds)}")

        by_kind = {}
        for o in objects:
            by_kind.setdefault(o["kind"], []).append(o)
        deployment = by_kind["Deployment"][0]
        pod = deployment["spec"]["template"]["spec"]
        container = pod["containers"][0]

        # Every flag passed is one `serve` takes.
        help_text = subprocess.run(
            [args.headroom, "serve", "--help"], check=True, capture_output=True, text=True
        ).stdout
        known = set(re.findall(r"--[a-z][a-z0-9-]*", help_text))
        flags = [a for a in container["args"] if a.startswith("--")]
        unknown = [f for f in flags if f not in known]
        if container["args"][0] != "serve" or unknown:
            fail(f"the Deployment runs `headroom {' '.join(container['args'])}`; unknown to serve: {unknown}")
        print(f"ok   args: serve takes all {len(flags)} flags the Deployment passes")

        # The configuration mounted passes the binary's own check.
        config = by_kind["ConfigMap"][0]["data"]["headroom.toml"]
        config_path = os.path.join(tmp, "headroom.toml")
        with open(config_path, "w") as f:
            f.write(config)
        check = subprocess.run(
            [args.headroom, "config", "check", config_path], capture_output=True, text=True
        )
        if check.returncode != 0:
            fail(f"headroom config check on the ConfigMap's headroom.toml: {check.stderr.strip()}")
        print(f"ok   config: {check.stdout.strip()}")

        # Probes ask the endpoints meant for them, on a port the container names.
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        for probe, path in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")]:
            get = container[probe]["httpGet"]
            if get["path"] != path or get["port"] not in ports:
                fail(f"{probe} asks {get}; it should ask {path} on a named port")
        listen = container["args"][container["args"].index("--listen") + 1]
        if not listen.endswith(f":{ports['http']}"):
            fail(f"--listen {listen} is not the container's http port {ports['http']}")
        external = container["args"][container["args"].index("--external-metrics-listen") + 1]
        if not external.endswith(f":{ports['metrics-api']}"):
            fail(f"--external-metrics-listen {external} is not the metrics-api port")
        print("ok   probes: /readyz and /healthz on the port --listen serves")

        # The Service targets the container's ports; the APIService points at the Service's.
        service = by_kind["Service"][0]
        for p in service["spec"]["ports"]:
            if p["targetPort"] not in ports:
                fail(f"Service port {p['name']} targets {p['targetPort']}, not a container port")
        selector = service["spec"]["selector"]
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        if any(labels.get(k) != v for k, v in selector.items()):
            fail(f"the Service selects {selector}; the pods carry {labels}")
        api = by_kind["APIService"][0]["spec"]["service"]
        https = [p for p in service["spec"]["ports"] if p["port"] == api["port"]]
        if api["name"] != service["metadata"]["name"] or not https or https[0]["targetPort"] != "metrics-api":
            fail(f"the APIService points at {api}, not the Service's external metrics port")
        print("ok   service: ports target the container's, the APIService reaches the External Metrics listener")

        # The restricted Pod Security Standard the namespace enforces.
        context = container["securityContext"]
        restricted = (
            pod["securityContext"].get("runAsNonRoot") is True
            and pod["securityContext"].get("seccompProfile", {}).get("type") == "RuntimeDefault"
            and context.get("allowPrivilegeEscalation") is False
            and context.get("capabilities", {}).get("drop") == ["ALL"]
            and context.get("readOnlyRootFilesystem") is True
        )
        if not restricted:
            fail(f"the pod is not restricted: {pod['securityContext']} {context}")
        print("ok   security: non-root, no privilege escalation, all capabilities dropped, read-only root")

        check_monitoring(added, service)


def check_monitoring(added, service):
    by_kind = {o["kind"]: o for o in added}
    if sorted(by_kind) != ["ConfigMap", "PrometheusRule", "ServiceMonitor"]:
        fail(f"deploy/kubernetes/monitoring adds {sorted(by_kind)}; expected a ServiceMonitor, a PrometheusRule and the dashboard ConfigMap")

    monitor = by_kind["ServiceMonitor"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    if any(service["metadata"].get("labels", {}).get(k) != v for k, v in selector.items()):
        fail(f"the ServiceMonitor selects {selector}; the Service carries {service['metadata'].get('labels')}")
    service_ports = {p["name"] for p in service["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        if endpoint["port"] != "http" or endpoint["port"] not in service_ports or endpoint.get("path") != "/metrics":
            fail(f"the ServiceMonitor scrapes {endpoint}; it should scrape /metrics on the Service's http port")
        credentials = endpoint.get("authorization", {}).get("credentials", {})
        if endpoint["authorization"].get("type") != "Bearer" or not credentials.get("name") or not credentials.get("key"):
            fail("the ServiceMonitor must send a bearer token from a Secret: /metrics needs the metrics scope")
    if service["metadata"]["labels"].get(monitor["spec"]["jobLabel"]) != "headroom":
        fail("the scrape job must be named headroom (jobLabel), as the rules and the dashboard expect")
    print("ok   monitoring: the ServiceMonitor scrapes /metrics on the Service's http port with a bearer token, job headroom")

    rule = by_kind["PrometheusRule"]
    want = prometheus_rule()
    if rule["spec"] != want["spec"]:
        fail("monitoring/prometheusrule.yaml differs from deploy/prometheus/rules.yml: run check.py --write-prometheusrule")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rules.yml")
        with open(path, "w") as f:
            yaml.safe_dump(rule["spec"], f)
        promtool = subprocess.run(["promtool", "check", "rules", path], capture_output=True, text=True)
        if promtool.returncode != 0:
            fail(f"promtool check rules on the PrometheusRule's spec:\n{promtool.stdout}{promtool.stderr}")
    print(f"ok   monitoring: the PrometheusRule carries rules.yml's {sum(len(g['rules']) for g in rule['spec']['groups'])} rules (promtool check rules)")

    dashboard = by_kind["ConfigMap"]
    with open(DASHBOARD) as f:
        if json.loads(dashboard["data"]["headroom.json"]) != json.load(f):
            fail("the dashboard ConfigMap does not carry deploy/grafana/headroom.json")
    if dashboard["metadata"]["labels"].get("grafana_dashboard") != "1":
        fail("the dashboard ConfigMap lacks the grafana_dashboard label Grafana's sidecar looks for")
    print("ok   monitoring: the Grafana dashboard ConfigMap carries deploy/grafana/headroom.json")


if __name__ == "__main__":
    main()
