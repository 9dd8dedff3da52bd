"""Metric names used by the deploy/ artefacts: PromQL in the Grafana dashboard, the alerting rules,
the prometheus-adapter rules and the KEDA ScaledObject's Prometheus triggers (deploy/kserve), and
the HPA's custom metric.

PromQL is not parsed in full: strings, label matchers {..}, ranges [..], grouping clauses
by/without/on/ignoring/group_left/group_right (..), offsets and numbers are removed; what is left
are identifiers, and an identifier followed by "(" is a function or aggregation, a few are
keywords; every other one is a metric name. `self_test()` pins this down on known expressions.
"""
import json
import os
import re

import yaml

IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
            "group_right", "bool", "offset", "atan2", "inf", "nan", "start", "end"}
STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
GRAFANA_VAR = re.compile(r"\$(?:\{[^}]*\}|[A-Za-z_][A-Za-z0-9_]*)")
NUMBER = re.compile(r"(?<![A-Za-z0-9_:.])(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
                    r"(?![A-Za-z0-9_:])")
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
OFFSET = re.compile(r"\boffset\s+-?[0-9a-zA-Z$_{}]+")
AT = re.compile(r"@\s*(?:start\(\)|end\(\)|[0-9.]+)")


def names_in_expr(expr):
    """Metric names referenced by one PromQL expression (Grafana variables allowed)."""
    s = STRING.sub('""', expr)
    s = GRAFANA_VAR.sub("1", s)
    prev = None
    while prev != s:  # innermost first; matchers and ranges do not nest, but be safe
        prev = s
        s = re.sub(r"\{[^{}]*\}", " ", s)
        s = re.sub(r"\[[^\[\]]*\]", " ", s)
    s = GROUPING.sub(" ", s)
    s = OFFSET.sub(" ", s)
    s = AT.sub(" ", s)
    s = NUMBER.sub(" ", s)
    names = set()
    for m in IDENT.finditer(s):
        word = m.group(0)
        rest = s[m.end():].lstrip()
        if rest.startswith("("):  # function or aggregation
            continue
        if word.lower() in KEYWORDS:
            continue
        names.add(word)
    return names


def names_in_grafana_query(query):
    """Template variable queries: label_values(expr, label), label_values(label), query_result(expr)."""
    q = query.strip()
    m = re.fullmatch(r"label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)", q, re.S)
    if m:
        return names_in_expr(m.group(1))
    if re.fullmatch(r"label_values\(\s*[A-Za-z_][A-Za-z0-9_]*\s*\)", q):
        return set()
    m = re.fullmatch(r"query_result\((.*)\)", q, re.S)
    if m:
        return names_in_expr(m.group(1))
    return names_in_expr(q)


def walk_panels(panels):
    for p in panels or []:
        yield p
        yield from walk_panels(p.get("panels"))


def dashboard_exprs(path):
    """[(where, expr, is_template_query)] of a Grafana dashboard JSON."""
    with open(path) as f:
        dash = json.load(f)
    out = []
    for p in walk_panels(dash.get("panels")):
        for t in p.get("targets") or []:
            if t.get("expr"):
                out.append((f"panel {p.get('id')} '{p.get('title')}' {t.get('refId')}",
                            t["expr"], False))
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v.get("query")
            q = q.get("query") if isinstance(q, dict) else q
            if q:
                out.append((f"variable ${v.get('name')}", q, True))
    return out


def rules_exprs(path):
    """[(where, expr)] and the recording rule names of a Prometheus rules file."""
    with open(path) as f:
        doc = yaml.safe_load(f)
    out, recorded = [], set()
    for g in doc.get("groups", []):
        for r in g.get("rules", []):
            name = r.get("alert") or r.get("record")
            if r.get("record"):
                recorded.add(r["record"])
            out.append((f"{os.path.basename(path)} {g.get('name')}/{name}", str(r["expr"])))
    return out, recorded


def adapter_exprs(path):
    """prometheus-adapter rules: their seriesQuery selectors, and the exposed metric names."""
    with open(path) as f:
        doc = yaml.safe_load(f)
    out, exposed = [], set()
    for i, r in enumerate(doc.get("rules", [])):
        out.append((f"{os.path.basename(path)} rule {i}", r["seriesQuery"]))
        exposed.add(r.get("name", {}).get("as") or "")
    return out, exposed


def hpa_custom_metrics(path):
    """Pods/Object/External metric names of the HorizontalPodAutoscaler(s) in a YAML file."""
    names = []
    with open(path) as f:
        for doc in yaml.safe_load_all(f):
            if not doc or doc.get("kind") != "HorizontalPodAutoscaler":
                continue
            for m in doc["spec"].get("metrics", []):
                kind = m["type"]
                if kind in ("Pods", "Object", "External"):
                    names.append(m[kind.lower()]["metric"]["name"])
    return names


def keda_queries(path):
    """[(where, query)] of the Prometheus triggers of the KEDA ScaledObject(s) in a YAML file."""
    out = []
    with open(path) as f:
        for doc in yaml.safe_load_all(f):
            if not doc or doc.get("kind") != "ScaledObject":
                continue
            for t in doc.get("spec", {}).get("triggers", []):
                if t.get("type") == "prometheus":
                    out.append((f"{os.path.basename(path)} trigger {t.get('name')}",
                                t.get("metadata", {}).get("query", "")))
    return out


def collect(repo):
    """{metric name: [where used]} over every deploy/ artefact, plus recording rule names."""
    used, recorded = {}, set()
    def add(where, names):
        for n in names:
            used.setdefault(n, []).append(where)
    dash = os.path.join(repo, "deploy/grafana/mha-serve-dashboard.json")
    for where, expr, is_var in dashboard_exprs(dash):
        add("dashboard " + where, names_in_grafana_query(expr) if is_var else names_in_expr(expr))
    rules_dir = os.path.join(repo, "deploy/prometheus/rules")
    for fn in sorted(os.listdir(rules_dir)):
        if fn.endswith((".yml", ".yaml")) and not fn.endswith((".test.yml", ".test.yaml")):
            exprs, rec = rules_exprs(os.path.join(rules_dir, fn))
            recorded |= rec
            for where, expr in exprs:
                add("rules " + where, names_in_expr(expr))
    adapter = os.path.join(repo, "deploy/k8s/prometheus-adapter-rules.yaml")
    exprs, _ = adapter_exprs(adapter)
    for where, expr in exprs:
        add("adapter " + where, names_in_expr(expr))
    hpa = os.path.join(repo, "deploy/k8s/base/hpa.yaml")
    add("k8s base/hpa.yaml", hpa_custom_metrics(hpa))
    kserve = os.path.join(repo, "deploy/kserve")
    for fn in sorted(os.listdir(kserve)) if os.path.isdir(kserve) else []:
        if fn.endswith((".yaml", ".yml")):
            for where, expr in keda_queries(os.path.join(kserve, fn)):
                add("kserve " + where, names_in_expr(expr))
    return used, recorded


def self_test():
    cases = {
        'histogram_quantile(0.99, sum by (le, model) (rate(mha_request_duration_seconds_bucket'
        '{model=~"$model", instance=~"$instance"}[$__rate_interval])))':
            {"mha_request_duration_seconds_bucket"},
        'sum by (job, model) (rate(mha_requests_total{code!="OK"}[5m])) / '
        'sum by (job, model) (rate(mha_requests_total[5m])) > 0.05': {"mha_requests_total"},
        'up{job="mha-serve"} == 0': {"up"},
        'absent(up{job="mha-serve"})': {"up"},
        'count(mha_model_loaded{model=~"a|b"} == 0) or vector(0)': {"mha_model_loaded"},
        'a_total offset 5m / on (instance) group_left (version) b_info * 1e3 + 0x1F - 2.5e-3':
            {"a_total", "b_info"},
        'rate(x[5m:1m]) and ignoring(code) y unless z @ start()': {"x", "y", "z"},
        'sum without (le) (rate(h_bucket[$__interval]))': {"h_bucket"},
        'mha_inflight_requests{namespace!="",pod!=""}': {"mha_inflight_requests"},
        'sum by (model) (rate(mha_real_tokens_total{model=~"$model"}[$__rate_interval])) / bool '
        'sum by (model) (rate(mha_padded_tokens_total{model=~"$model"}[$__rate_interval]))':
            {"mha_real_tokens_total", "mha_padded_tokens_total"},
        'process_resident_memory_bytes{instance=~"${instance}"}': {"process_resident_memory_bytes"},
        'label_replace(m, "dst", "$1", "src", "(.*)")': {"m"},
        'level:metric:rate5m > 1': {"level:metric:rate5m"},
        'max_over_time(deriv(rate(q_bucket[1m])[5m:])[1h:5m])': {"q_bucket"},
    }
    for expr, want in cases.items():
        got = names_in_expr(expr)
        assert got == want, f"self-test: {expr!r}: got {sorted(got)}, want {sorted(want)}"
    assert names_in_grafana_query('label_values(mha_model_loaded{instance=~"$instance"}, model)') \
        == {"mha_model_loaded"}
    assert names_in_grafana_query("label_values(model)") == set()
