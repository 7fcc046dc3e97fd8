#!/usr/bin/env python3
"""Checks the Grafana dashboard (headroom.json) against a real Prometheus scraping a real
Headroom, so a panel that reads a renamed metric, a wrong label or a bad expression fails here
rather than on an operator's screen.

It runs `headroom demo` (the simulated cloud, a burst, refusals, spend), has Debian's
`prometheus` scrape it every second with deploy/prometheus/rules.yml loaded, and then:
  - checks the dashboard's shape: unique panel ids, panels that do not overlap on the 24-column
    grid, every query on the `$datasource` variable, every `$variable` defined;
  - runs every panel query over the demo's window (variables as Grafana would substitute them
    with "All" selected) and requires an answer without error that has data, except for the
    few panels (or queries) listed in QUIET whose events the demo does not cause (their metric names must
    still be ones Headroom exports);
  - runs the template variables' queries and requires the demo's job and pools among their values;
  - requires every rule in rules.yml to be loaded and healthy, and every recording rule to have
    recorded a series.

Usage: check.py --headroom PATH_TO_BINARY [--seconds 45]
"""
import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
RULES = os.path.join(HERE, "..", "prometheus", "rules.yml")
SCRAPE_INTERVAL_S = 1
# What Grafana's $__rate_interval becomes for a 1 s scrape interval and a short window: at least
# four scrapes, as Grafana computes it, with room for a missed scrape.
RATE_INTERVAL = "15s"
# Panels (by title) whose events the demo does not cause, so they may have no data here. Their
# queries must still run without error and name only metrics Headroom exports.
QUIET = {
    "Spot interruptions": "the demo's simulated cloud sends no spot interruption notice",
    "Cloud call errors": "the demo's simulated cloud answers every call",
    "Fallbacks": "the demo's pools have one offering each, so nothing falls back",
    "Orphan instances": "the demo leaves no instance the ledger does not know",
    "Oldest request age": "the demo's fluid queue model signals depth and arrivals, not request ages",
    # One query of a panel: title/refId.
    "Forecast and its error/B": "a forecast is scored against the demand that came after it; the demo is over first",
}
# Recording rules that record nothing without the events above.
QUIET_RULES = {"job_pool_kind:headroom_fallbacks:rate5m"}
GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__range", "__range_s"}


def fail(message):
    print(f"FAIL {message}", file=sys.stderr)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(base, path, **params):
    url = f"{base}{path}?{urllib.parse.urlencode(params, doseq=True)}"
    with urllib.request.urlopen(url, timeout=30) as response:
        body = json.load(response)
    if body.get("status") != "success":
        raise RuntimeError(f"{path} {params}: {body}")
    return body["data"]


def wait_until(what, ready, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except OSError:
            pass
        time.sleep(0.5)
    fail(f"{what} not ready within {timeout_s} s")


def queries(dashboard):
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel, target


def check_shape(dashboard):
    ids = [p["id"] for p in dashboard["panels"]]
    if len(ids) != len(set(ids)):
        fail(f"panel ids repeat: {sorted(ids)}")
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    if "datasource" not in variables:
        fail("the dashboard needs a `datasource` variable, so it works with any Prometheus")
    cells = {}
    for panel in dashboard["panels"]:
        g = panel["gridPos"]
        if g["x"] < 0 or g["x"] + g["w"] > 24:
            fail(f"panel {panel['title']!r} leaves the 24-column grid: {g}")
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                if (x, y) in cells:
                    fail(f"panels {cells[(x, y)]!r} and {panel['title']!r} overlap at {x},{y}")
                cells[(x, y)] = panel["title"]
        if panel["type"] == "row":
            continue
        if not panel.get("targets"):
            fail(f"panel {panel['title']!r} has no query")
        if not panel.get("description"):
            fail(f"panel {panel['title']!r} has no description for the operator reading it")
        refs = [t["refId"] for t in panel["targets"]]
        if len(refs) != len(set(refs)):
            fail(f"panel {panel['title']!r} repeats a refId: {refs}")
        for source in [panel.get("datasource")] + [t.get("datasource") for t in panel["targets"]]:
            if source != {"type": "prometheus", "uid": "${datasource}"}:
                fail(f"panel {panel['title']!r} does not read the $datasource variable: {source}")
    for panel, target in queries(dashboard):
        for name in re.findall(r"\$(\w+)", target["expr"]):
            if name not in variables and name not in GRAFANA_BUILTINS:
                fail(f"panel {panel['title']!r} uses ${name}, which the dashboard does not define")
    for title in QUIET:
        if title.split("/")[0] not in {p["title"] for p in dashboard["panels"]}:
            fail(f"QUIET names a panel the dashboard lacks: {title!r}")


def substitute(expr, job):
    return (
        expr.replace("$__rate_interval", RATE_INTERVAL)
        .replace("$job", job)
        .replace("$pool", ".*")
    )


def metric_names(expr):
    without_strings = re.sub(r'"[^"]*"', '""', expr)
    return {
        name
        for name in re.findall(r"\b(headroom_[a-z0-9_]+|up)\b(?!\s*\()", without_strings)
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--headroom", required=True)
    parser.add_argument("--seconds", type=int, default=45)
    args = parser.parse_args()
    for tool in ("prometheus",):
        if shutil.which(tool) is None:
            fail(f"{tool} is missing: apt-get install prometheus")

    with open(os.path.join(HERE, "headroom.json")) as f:
        dashboard = json.load(f)
    check_shape(dashboard)

    job = "headroom"
    headroom_port, prometheus_port = free_port(), free_port()
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write(
                f"global:\n  scrape_interval: {SCRAPE_INTERVAL_S}s\n"
                f"  evaluation_interval: {SCRAPE_INTERVAL_S}s\n"
                f"rule_files:\n  - {os.path.abspath(RULES)}\n"
                f"scrape_configs:\n  - job_name: {job}\n"
                f"    static_configs:\n      - targets: ['127.0.0.1:{headroom_port}']\n"
            )
        demo = subprocess.Popen(
            [args.headroom, "demo", "--listen", f"127.0.0.1:{headroom_port}",
             "--seconds", str(args.seconds)],
            stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(tmp, "demo.log"), "w"),
        )
        prometheus = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp}/data",
             f"--web.listen-address=127.0.0.1:{prometheus_port}"],
            stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(tmp, "prometheus.log"), "w"),
        )
        base = f"http://127.0.0.1:{prometheus_port}"
        try:
            start = time.time()
            wait_until("prometheus", lambda: urllib.request.urlopen(f"{base}/-/ready", timeout=2).status == 200, 60)
            # The families Headroom exports, from its own exposition.
            families = set()

            def read_families():
                with urllib.request.urlopen(f"http://127.0.0.1:{headroom_port}/metrics", timeout=5) as r:
                    families.update(re.findall(r"^# TYPE (\S+)", r.read().decode(), re.M))
                return bool(families)

            wait_until("headroom demo's /metrics", read_families, 60)
            code = demo.wait(timeout=args.seconds + 120)
            if code != 0:
                print(open(os.path.join(tmp, "demo.log")).read()[-3000:], file=sys.stderr)
                fail(f"headroom demo exited with {code}")
            # Let the rules evaluate over the last scrapes.
            time.sleep(3)
            end = time.time()
            window = {"start": f"{start:.3f}", "end": f"{end:.3f}", "step": "1"}

            scraped = set(get(base, "/api/v1/label/__name__/values"))
            # A family with no series yet (an event that has not happened) is left out of the
            # exposition; its name is still one the engine registers (metrics.rs).
            with open(os.path.join(HERE, "..", "..", "crates", "headroom-engine", "src", "metrics.rs")) as f:
                registered = {f"headroom_{n}" for n in re.findall(r'"([a-z0-9_]+)"', f.read())}
            exported = scraped | families | registered
            if "headroom_build_info" not in scraped:
                print(open(os.path.join(tmp, "prometheus.log")).read()[-3000:], file=sys.stderr)
                fail("Prometheus never scraped the demo's /metrics")

            checked = 0
            for panel, target in queries(dashboard):
                expr = substitute(target["expr"], job)
                unknown = {
                    n for n in metric_names(expr)
                    if n not in exported and re.sub(r"_(bucket|sum|count|total)$", "", n) not in exported
                }
                if unknown:
                    fail(f"panel {panel['title']!r} reads metrics Headroom does not export: {sorted(unknown)}")
                try:
                    result = get(base, "/api/v1/query_range", query=expr, **window)["result"]
                except Exception as error:  # noqa: BLE001 - reported with the query
                    fail(f"panel {panel['title']!r} query {target['refId']} fails: {error}")
                quiet = panel["title"] in QUIET or f"{panel['title']}/{target['refId']}" in QUIET
                if not result and not quiet:
                    fail(f"panel {panel['title']!r} query {target['refId']} has no data over the demo: {expr}")
                checked += 1

            for variable in dashboard["templating"]["list"]:
                if variable["type"] != "query":
                    continue
                m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", variable["definition"])
                if not m:
                    fail(f"variable {variable['name']} is not a label_values query")
                match, label = substitute(m.group(1), job), m.group(2)
                values = get(base, f"/api/v1/label/{label}/values", **{"match[]": match})
                want = {"job": [job], "pool": ["llama-70b-interactive", "mistral-7b-batch"]}.get(variable["name"], [])
                if not values or any(w not in values for w in want):
                    fail(f"variable {variable['name']} lists {values}, expected {want}")

            rules = [
                rule
                for group in get(base, "/api/v1/rules")["groups"]
                for rule in group["rules"]
            ]
            with open(RULES) as f:
                declared = len(re.findall(r"^\s*- (alert|record):", f.read(), re.M))
            if len(rules) != declared:
                fail(f"Prometheus loaded {len(rules)} rules of the {declared} in rules.yml")
            for rule in rules:
                if rule["health"] != "ok":
                    fail(f"rule {rule['name']} is {rule['health']}: {rule.get('lastError')}")
                if rule["type"] == "recording" and rule["name"] not in QUIET_RULES:
                    if not get(base, "/api/v1/query_range", query=rule["name"], **window)["result"]:
                        fail(f"recording rule {rule['name']} recorded nothing over the demo")
            print(
                f"ok: {checked} dashboard queries and {len(rules)} rules against Prometheus "
                f"scraping `headroom demo` for {args.seconds} s"
            )
        finally:
            for process in (demo, prometheus):
                if process.poll() is None:
                    process.terminate()
                    try:
                        process.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        process.kill()


if __name__ == "__main__":
    main()
