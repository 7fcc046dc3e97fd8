#!/usr/bin/env python3
"""Renders deploy/kubernetes with `kubectl kustomize`, validates every object against the
Kubernetes schemas (kubernetes-validate, strict), and checks the manifests against the binary
they deploy: every flag the Deployment passes is one `headroom serve` takes, the configuration
the ConfigMap carries passes `headroom config check`, the probes ask the health endpoints, the
Service targets ports the container names, and the pod runs as the restricted profile asks.

Usage: check.py --headroom PATH_TO_BINARY [--kubernetes-version 1.32.0]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))


def fail(message):
    print(f"FAIL {message}", file=sys.stderr)
    sys.exit(1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--headroom", required=True)
    parser.add_argument("--kubernetes-version", default="1.32.0")
    args = parser.parse_args()

    rendered = subprocess.run(
        ["kubectl", "kustomize", "--load-restrictor", "LoadRestrictionsNone", HERE],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
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


if __name__ == "__main__":
    main()
