#!/usr/bin/python3
"""Static checks of deploy/grafana/mha-serve-dashboard.json (no Grafana, no server):

  - importable dashboard JSON: schemaVersion 36..39, uid, title, unique panel ids, no two panels
    overlapping on the grid;
  - every panel and query uses the ${DS_PROMETHEUS} datasource variable, which exists (type
    datasource, prometheus), and a `model` query variable exists;
  - the panels the runbook relies on are there: throughput by model and code, latency
    p50/p90/p99, queue vs compute time, batch size and padding efficiency, in flight and queue
    depth, RSS and CPU, GPU memory;
  - every PromQL expression parses: each (with the Grafana variables replaced) becomes a recording
    rule in a temporary file given to `promtool check rules`.
The metric names themselves are checked against a running server by check_metric_names.py.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import promql_names  # noqa: E402

DS_UID = "${DS_PROMETHEUS}"


def grafana_to_promql(expr):
    expr = expr.replace("$__rate_interval", "5m").replace("$__interval", "1m")
    expr = expr.replace("$__range", "1h")
    return re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", ".*", expr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dashboard", required=True)
    ap.add_argument("--promtool", default="promtool")
    args = ap.parse_args()
    with open(args.dashboard) as f:
        dash = json.load(f)
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    check(36 <= dash.get("schemaVersion", 0) <= 39, f"schemaVersion {dash.get('schemaVersion')}")
    check(dash.get("uid") and dash.get("title"), "uid and title")
    variables = {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}
    ds = variables.get("DS_PROMETHEUS", {})
    check(ds.get("type") == "datasource" and ds.get("query") == "prometheus",
          "templating: DS_PROMETHEUS must be a datasource variable of type prometheus")
    model = variables.get("model", {})
    check(model.get("type") == "query", "templating: a `model` query variable")
    for name, v in variables.items():
        if v.get("type") == "query":
            check(v.get("datasource", {}).get("uid") == DS_UID,
                  f"variable ${name} must use {DS_UID}")

    panels = [p for p in promql_names.walk_panels(dash.get("panels")) if p.get("type") != "row"]
    ids = [p.get("id") for p in promql_names.walk_panels(dash.get("panels"))]
    check(len(ids) == len(set(ids)) and None not in ids, "panel ids must be unique")
    cells = {}
    for p in promql_names.walk_panels(dash.get("panels")):
        g = p.get("gridPos", {})
        for x in range(g.get("x", 0), g.get("x", 0) + g.get("w", 0)):
            for y in range(g.get("y", 0), g.get("y", 0) + g.get("h", 0)):
                if (x, y) in cells:
                    failures.append(f"panel {p.get('id')} overlaps panel {cells[(x, y)]} at {x},{y}")
                cells[(x, y)] = p.get("id")
                check(x < 24, f"panel {p.get('id')} wider than the 24-column grid")
    exprs = []
    for p in panels:
        check(p.get("datasource", {}).get("uid") == DS_UID,
              f"panel '{p.get('title')}' datasource must be {DS_UID}")
        check(p.get("targets"), f"panel '{p.get('title')}' has no query")
        for t in p.get("targets", []):
            check(t.get("datasource", {}).get("uid") == DS_UID,
                  f"panel '{p.get('title')}' query {t.get('refId')} datasource must be {DS_UID}")
            if t.get("expr"):
                exprs.append((p, t["expr"]))
    check(len(exprs) >= 15, f"only {len(exprs)} queries")

    # Required views: (description, predicate over one panel's expressions).
    def panel_exprs(p):
        return " ".join(t.get("expr", "") for t in p.get("targets", []))
    required = {
        "throughput by model and code": lambda e: "mha_requests_total" in e and
            re.search(r"by \((model, code|code, model)\)", e),
        "latency p50/p90/p99": lambda e: "mha_request_duration_seconds_bucket" in e and
            all(f"histogram_quantile({q}," in e for q in ("0.5", "0.9", "0.99")),
        "queue vs compute time": lambda e: "mha_queue_duration_seconds" in e and
            "mha_compute_duration_seconds" in e,
        "batch size": lambda e: "mha_batch_size" in e,
        "padding efficiency": lambda e: "mha_padding_efficiency" in e or
            ("mha_real_tokens_total" in e and "mha_padded_tokens_total" in e),
        "in flight and queue depth": lambda e: "mha_inflight_requests" in e and "mha_queue_depth" in e,
        "resident memory": lambda e: "process_resident_memory_bytes" in e,
        "CPU": lambda e: "process_cpu_seconds_total" in e,
        "GPU memory": lambda e: "mha_gpu_memory_allocated_bytes" in e or
            "mha_gpu_memory_reserved_bytes" in e,
    }
    for what, pred in required.items():
        check(any(pred(panel_exprs(p)) for p in panels), f"no panel shows {what}")
    check(any("$model" in e for _, e in exprs), "no query filters on $model")

    # Syntax: promtool parses every expression (as a recording rule).
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:panel{p.get('id')}:q{i}", "expr": grafana_to_promql(e)}
        for i, (p, e) in enumerate(exprs)]}]}
    for v in variables.values():
        if v.get("type") == "query":
            q = v["query"]["query"] if isinstance(v.get("query"), dict) else v.get("query", "")
            m = re.fullmatch(r"label_values\((.*),\s*\w+\s*\)", q.strip(), re.S)
            if m:
                rules["groups"][0]["rules"].append(
                    {"record": f"dashboard:var_{v['name']}", "expr": grafana_to_promql(m.group(1))})
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        yaml.safe_dump(rules, f)
        tmp = f.name
    try:
        r = subprocess.run([args.promtool, "check", "rules", tmp], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    except FileNotFoundError:
        failures.append(f"{args.promtool} not found (Debian package prometheus)")
        r = None
    finally:
        os.unlink(tmp)
    if r is not None and r.returncode != 0:
        failures.append("promtool cannot parse the dashboard's queries:\n" + r.stdout)

    for f in failures:
        print("FAIL: " + f)
    if failures:
        return 1
    print(f"OK: {len(panels)} panels, {len(exprs)} queries parsed by promtool, "
          f"{len(required)} required views present")
    return 0


if __name__ == "__main__":
    sys.exit(main())
