#!/usr/bin/python3
"""deploy/kserve/: KServe ClusterServingRuntime + InferenceService and the KEDA ScaledObject,
checked without a cluster.

  1. Every object of every deploy/kserve/*.yaml validates STRICTLY against KServe's / KEDA's own
     CRD schema (tests/deploy/schemas/, crd_schema.py: an unknown field is an error); KEDA's
     Prometheus trigger metadata against the keys of KEDA's Prometheus scaler.
  2. `kubectl kustomize deploy/kserve` renders exactly those objects, which validate too.
  3. Cross-checks: container args are real mha-server flags (server/app/config.cc; with --server
     also `mha-server --help`) with valid choices; ports, probes (health service names the server
     registers) and Prometheus annotations agree with the flags; the InferenceService uses the
     runtime's name, model format and protocol, in Standard mode; the ScaledObject targets the
     InferenceService's Deployment and queries only metrics the server registers
     (server/serving/observability/metrics.cc, via promql_names).
  4. Negative self-checks: copies with an unknown field, a wrong type, a pruned field, a
     non-flag and an unknown metric must fail, so each check can fail.

  check_kserve.py --repo . [--kubectl kubectl] [--server build/server/mha-server]
"""
import argparse
import json
import os
import re
import subprocess
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import crd_schema  # noqa: E402
import promql_names  # noqa: E402
from check_k8s import render  # noqa: E402

GRPC_PORT, METRICS_PORT = 8500, 8502
KSERVE_PROTOCOLS = {"v1", "v2", "grpc-v1", "grpc-v2"}  # kserve pkg/constants/constants.go
DEPLOYMENT_MODES = {"Standard", "RawDeployment"}  # RawDeployment: the deprecated name
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def server_flags(repo):
    """{flag: [choices] or None} declared in server/app/config.cc (Add(app, "--x", ...), AddEnum,
    add_option_function and --config)."""
    text = open(os.path.join(repo, "server/app/config.cc")).read()
    flags = {}
    for m in re.finditer(r'Add\(app,\s*"(--[a-z0-9-]+)"(.*?);', text, re.S):
        choices = re.search(r"CLI::IsMember\(\{([^}]*)\}\)", m.group(2))
        flags[m.group(1)] = re.findall(r'"([^"]*)"', choices.group(1)) if choices else None
    for m in re.finditer(r'set_config\("(--[a-z0-9-]+)"', text):
        flags[m.group(1)] = None
    # Enum flags (AddEnum: their values are checked by the serving core's own parser) and flags
    # bound through a function (add_option_function): the name only.
    for m in re.finditer(r'(?:AddEnum\(app,|add_option_function<[^>]+>\()\s*"(--[a-z0-9-]+)"', text):
        flags.setdefault(m.group(1), None)
    return flags


def registered_metrics(repo):
    """Series names the server can export: the lifecycle series of metrics.cc
    (Register(prometheus::BuildX(), "name", ...)) and the statistics aggregators' of
    stats_export.cc (Family("name", ..., MetricType::X) and ExportHistogram(models, "name", ...))."""
    folder = os.path.join(repo, "server/serving/observability")
    text = "".join(open(os.path.join(folder, f)).read() for f in ("metrics.cc", "stats_export.cc"))
    found = re.findall(r'Register\(\s*prometheus::Build(\w+)\(\),\s*"([A-Za-z_:][\w:]*)"', text)
    found += [(k, n) for n, k in re.findall(
        r'Family\(\s*"([A-Za-z_:][\w:]*)",.*?MetricType::(\w+)\)', text, re.S)]
    found += [("Histogram", n) for n in re.findall(
        r'ExportHistogram\(\s*models,\s*"([A-Za-z_:][\w:]*)"', text)]
    names = set()
    for kind, name in found:
        names.add(name)
        if kind in ("Histogram", "Summary"):
            names |= {name + s for s in HISTOGRAM_SUFFIXES}
    return names


def parse_args(args):
    """[--flag=value | --flag value] -> [(flag, value)]."""
    out, i = [], 0
    while i < len(args):
        a = str(args[i])
        if not a.startswith("--"):
            out.append((None, a))
        elif "=" in a:
            out.append(tuple(a.split("=", 1)))
        elif i + 1 < len(args) and not str(args[i + 1]).startswith("--"):
            out.append((a, str(args[i + 1])))
            i += 1
        else:
            out.append((a, None))
        i += 1
    return out


def check_flags(args, flags, help_flags=None):
    errors = []
    for flag, value in parse_args(args):
        if flag is None:
            errors.append(f"argument {value!r} is not a --flag")
        elif flag not in flags:
            errors.append(f"{flag} is not an mha-server flag (server/app/config.cc)")
        elif help_flags is not None and flag not in help_flags:
            errors.append(f"{flag} is not in `mha-server --help`")
        elif flags[flag] and value not in flags[flag]:
            errors.append(f"{flag}={value}: not one of {flags[flag]}")
    return errors


def port_of(address):
    m = re.fullmatch(r".*:(\d+)", address or "")
    return int(m.group(1)) if m else None


def load_files(directory):
    """{path: [objects]} of every YAML file in `directory` except kustomization.yaml."""
    out = {}
    for fn in sorted(os.listdir(directory)):
        if fn.endswith((".yaml", ".yml")) and fn != "kustomization.yaml":
            with open(os.path.join(directory, fn)) as f:
                out[fn] = [d for d in yaml.safe_load_all(f) if d]
    return out


def check_runtime(csr, flags, help_flags, health_names, fail):
    spec = csr["spec"]
    if "grpc-v2" not in spec.get("protocolVersions", []):
        fail("ClusterServingRuntime: protocolVersions must include grpc-v2 (the OIP gRPC service)")
    for p in spec.get("protocolVersions", []):
        if p not in KSERVE_PROTOCOLS:
            fail(f"ClusterServingRuntime: protocol {p!r} is not one of KServe's {sorted(KSERVE_PROTOCOLS)}")
    if not spec.get("supportedModelFormats"):
        fail("ClusterServingRuntime: no supportedModelFormats")
    containers = spec.get("containers", [])
    if len(containers) != 1 or containers[0].get("name") != "kserve-container":
        fail("ClusterServingRuntime: one container named kserve-container (KServe's name)")
        return
    ctr = containers[0]
    args = ctr.get("args", [])
    for e in check_flags(args, flags, help_flags):
        fail("ClusterServingRuntime args: " + e)
    given = dict((f, v) for f, v in parse_args(args) if f)
    if given.get("--model-repository") != "/mnt/models":
        fail("ClusterServingRuntime: --model-repository=/mnt/models (where KServe puts storageUri)")
    if port_of(given.get("--grpc-address")) != GRPC_PORT:
        fail(f"ClusterServingRuntime: --grpc-address on port {GRPC_PORT}")
    if port_of(given.get("--metrics-address")) != METRICS_PORT:
        fail(f"ClusterServingRuntime: --metrics-address on port {METRICS_PORT}")
    ports = ctr.get("ports", [])
    if not ports or ports[0].get("containerPort") != GRPC_PORT or \
            not re.search("grpc|h2c", ports[0].get("name", "")):
        fail(f"ClusterServingRuntime: first port {GRPC_PORT} named h2c/grpc (KServe's Service "
             "takes the first port, appProtocol h2c from the name)")
    if not any(p.get("containerPort") == METRICS_PORT for p in ports):
        fail(f"ClusterServingRuntime: container port {METRICS_PORT} (metrics)")
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        grpc = (ctr.get(probe) or {}).get("grpc")
        if probe == "readinessProbe" and not grpc:
            fail("ClusterServingRuntime: readinessProbe must be a grpc probe")
        if grpc:
            if grpc.get("port") != GRPC_PORT:
                fail(f"ClusterServingRuntime: {probe}.grpc.port must be {GRPC_PORT}")
            if grpc.get("service", "") not in health_names:
                fail(f"ClusterServingRuntime: {probe}.grpc.service {grpc.get('service')!r} is not "
                     f"a health service name the server sets ({sorted(health_names)})")
    ann = spec.get("annotations", {})
    if ann.get("prometheus.io/scrape") != "true" or ann.get("prometheus.io/port") != str(METRICS_PORT):
        fail(f"ClusterServingRuntime: annotations prometheus.io/scrape \"true\", port \"{METRICS_PORT}\"")
    for key in ("prometheus.io/port", "prometheus.kserve.io/port"):
        if key in ann and ann[key] != str(port_of(given.get("--metrics-address"))):
            fail(f"ClusterServingRuntime: {key} {ann[key]} is not the --metrics-address port")


def grace(csr):
    ctr = csr["spec"]["containers"][0]
    given = dict((f, v) for f, v in parse_args(ctr.get("args", [])) if f)
    pre = (((ctr.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}).get("command", [])
    pre_stop = float(pre[1]) if len(pre) == 2 and pre[0] == "sleep" else 0.0
    return pre_stop + float(given.get("--grace-period-s", 10))


def check_isvc(isvc, csr, has_keda, fail):
    ann = isvc["metadata"].get("annotations", {})
    if ann.get("serving.kserve.io/deploymentMode") not in DEPLOYMENT_MODES:
        fail(f"InferenceService: annotation serving.kserve.io/deploymentMode must be one of "
             f"{sorted(DEPLOYMENT_MODES)} (no Knative: sessions need a stable replica)")
    if has_keda and ann.get("serving.kserve.io/autoscalerClass") != "external":
        fail("InferenceService: serving.kserve.io/autoscalerClass: external (KEDA scales it; "
             "otherwise KServe makes its own HPA too)")
    pred = isvc["spec"]["predictor"]
    model = pred.get("model", {})
    names = {f["name"] for f in csr["spec"].get("supportedModelFormats", [])}
    if model.get("modelFormat", {}).get("name") not in names:
        fail(f"InferenceService: modelFormat.name must be one of the runtime's {sorted(names)}")
    if model.get("runtime") != csr["metadata"]["name"]:
        fail(f"InferenceService: runtime must be {csr['metadata']['name']}")
    if model.get("protocolVersion") not in csr["spec"].get("protocolVersions", []):
        fail("InferenceService: protocolVersion not offered by the runtime")
    if not model.get("storageUri"):
        fail("InferenceService: no storageUri (the model repository KServe mounts at /mnt/models)")
    tgp = pred.get("terminationGracePeriodSeconds", 30)
    if tgp <= grace(csr):
        fail(f"InferenceService: terminationGracePeriodSeconds {tgp} must exceed preStop + "
             f"--grace-period-s = {grace(csr)}")


def check_scaledobject(so, isvc, isvc_docs_ns, trigger_schema, metrics, fail):
    name = isvc["metadata"]["name"] + "-predictor"  # kserve constants.PredictorServiceName
    ref = so["spec"]["scaleTargetRef"]
    if ref.get("kind", "Deployment") != "Deployment" or ref.get("name") != name:
        fail(f"ScaledObject: scaleTargetRef must be Deployment {name} (KServe's name)")
    if so["metadata"].get("namespace") != isvc_docs_ns:
        fail("ScaledObject: namespace differs from the InferenceService's")
    if not so["spec"].get("minReplicaCount", 0) >= 2:
        fail("ScaledObject: minReplicaCount >= 2 (a lost replica must not stop the service)")
    triggers = [t for t in so["spec"]["triggers"] if t["type"] == "prometheus"]
    if not triggers:
        fail("ScaledObject: no prometheus trigger")
    for t in triggers:
        meta = t.get("metadata", {})
        for e in crd_schema.validate(trigger_schema, meta):
            fail(f"ScaledObject trigger {t.get('name')}: metadata {e}")
        try:
            float(meta.get("threshold", ""))
        except ValueError:
            fail(f"ScaledObject trigger {t.get('name')}: threshold is not a number")
        for e in check_query(meta.get("query", ""), metrics, isvc_docs_ns, name):
            fail(f"ScaledObject trigger {t.get('name')}: {e}")


def check_query(query, metrics, namespace, deployment):
    errors = []
    names = promql_names.names_in_expr(query)
    if not names:
        errors.append("the query names no metric")
    for n in sorted(names - metrics):
        errors.append(f"{n} is not a metric mha-server registers (metrics.cc)")
    for ns in re.findall(r'namespace\s*=\s*"([^"]*)"', query):
        if ns != namespace:
            errors.append(f'namespace="{ns}" is not the InferenceService namespace {namespace}')
    for rx in re.findall(r'pod\s*=~\s*"([^"]*)"', query):
        if not re.fullmatch(rx, deployment + "-5d9c7b6f4-x2x7q"):
            errors.append(f'pod=~"{rx}" does not match the pods of Deployment {deployment}')
    return errors


def self_checks(schemas, docs, flags, metrics, trigger_schema):
    """Each check must be able to fail: broken copies must be refused."""
    problems = []
    for d in docs:
        kind = d["kind"]
        entry = schemas.get(d["apiVersion"], kind)
        cases = [("unknown field in spec", crd_schema.with_field(d, ["spec"], "mhaNoSuchField", 1)),
                 ("unknown metadata field", crd_schema.with_field(d, ["metadata"], "lables", {}))]
        pruned = crd_schema.first_pruned(entry["openAPIV3Schema"])
        if pruned:
            cases.append(("pruned field " + "/".join(pruned),
                          crd_schema.with_field(d, list(pruned[:-1]), pruned[-1], {})))
        if kind == "InferenceService":
            cases += [("typo minReplica", crd_schema.with_field(d, ["spec", "predictor"], "minReplica", 2)),
                      ("unknown field in model", crd_schema.with_field(
                          d, ["spec", "predictor", "model"], "storageURI", "pvc://x")),
                      ("minReplicas as text", crd_schema.with_field(d, ["spec", "predictor"], "minReplicas", "two"))]
        if kind == "ClusterServingRuntime":
            cases += [("unknown container field", crd_schema.with_field(
                d, ["spec", "containers", 0], "readynessProbe", {})),
                ("protocolVersions not a list", crd_schema.with_field(d, ["spec"], "protocolVersions", "grpc-v2"))]
        if kind == "ScaledObject":
            cases += [("unknown trigger field", crd_schema.with_field(
                d, ["spec", "triggers", 0], "metricsType", "Value"))]
        for what, broken in cases:
            if not schemas.validate(broken):
                problems.append(f"self-check: {kind} with {what} was accepted")
    if not check_flags(["--no-such-flag=1"], flags) or not check_flags(["--log-format=xml"], flags) \
            or check_flags(["--log-format=json", "--grpc-address", "0.0.0.0:8500"], flags):
        problems.append("self-check: the flag check does not tell real flags from others")
    if not check_query("sum(mha_no_such_metric)", metrics, "ns", "d") or \
            check_query("sum(mha_queue_depth) + rate(mha_request_duration_seconds_bucket[5m])",
                        metrics, "ns", "d"):
        problems.append("self-check: the metric check does not tell real metrics from others")
    if not crd_schema.validate(trigger_schema, {"serverAddress": "x", "query": "q", "threshhold": "1"}):
        problems.append("self-check: a misspelt Prometheus trigger key was accepted")
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--kubectl", default=os.environ.get("MHA_KUBECTL", "kubectl"))
    ap.add_argument("--server", help="built mha-server: its --help must list the flags too")
    args = ap.parse_args()
    crd_schema.self_test()
    promql_names.self_test()
    failures = []
    fail = failures.append
    schemas = crd_schema.Schemas()
    kserve_dir = os.path.join(args.repo, "deploy/kserve")
    files = load_files(kserve_dir)
    docs = [d for objs in files.values() for d in objs]
    for fn, objs in files.items():
        for d in objs:
            for e in schemas.validate(d):
                fail(f"{fn}: {d.get('kind')} {d.get('metadata', {}).get('name')}: {e}")
    rendered = render(args.kubectl, kserve_dir)
    key = lambda d: (d["apiVersion"], d["kind"], d["metadata"]["name"])  # noqa: E731
    if sorted(map(key, rendered)) != sorted(map(key, docs)):
        fail(f"kubectl kustomize deploy/kserve renders {sorted(map(key, rendered))}, the files "
             f"hold {sorted(map(key, docs))}: list every file in kustomization.yaml")
    for d in rendered:
        for e in schemas.validate(d):
            fail(f"rendered {d['kind']} {d['metadata']['name']}: {e}")

    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    for kind in ("ClusterServingRuntime", "InferenceService", "ScaledObject"):
        if len(by_kind.get(kind, [])) != 1:
            fail(f"want exactly one {kind} under deploy/kserve, found {len(by_kind.get(kind, []))}")
    flags = server_flags(args.repo)
    metrics = registered_metrics(args.repo)
    if len(flags) < 20 or len(metrics) < 20:
        fail(f"read only {len(flags)} flags / {len(metrics)} metrics from the server's sources")
    help_flags = None
    if args.server:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MHA_")}
        text = subprocess.run([args.server, "--help"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env).stdout
        help_flags = set(re.findall(r"^\s+(--[a-z0-9-]+)", text, re.MULTILINE))
    app = open(os.path.join(args.repo, "server/app/server_app.cc")).read()
    health_names = {""} | set(re.findall(r'"((?:mha|inference)\.[A-Za-z0-9_.]+)"', app))
    trigger = crd_schema.strict(json.load(
        open(os.path.join(crd_schema.SCHEMA_DIR, "keda-prometheus-trigger.json")))["schema"])
    if all(len(by_kind.get(k, [])) == 1
           for k in ("ClusterServingRuntime", "InferenceService", "ScaledObject")):
        csr, isvc = by_kind["ClusterServingRuntime"][0], by_kind["InferenceService"][0]
        so = by_kind["ScaledObject"][0]
        try:
            check_runtime(csr, flags, help_flags, health_names, fail)
            check_isvc(isvc, csr, True, fail)
            check_scaledobject(so, isvc, isvc["metadata"].get("namespace"), trigger, metrics, fail)
        except (KeyError, IndexError, TypeError, ValueError) as e:
            fail(f"cross-checks: a manifest lacks what they read: {type(e).__name__} {e}")
    failures += self_checks(schemas, docs, flags, metrics, trigger)
    for d in docs:
        e = schemas.get(d["apiVersion"], d["kind"])
        src = e["source"]
        print(f"{d['kind']} {d['metadata']['name']}: strict schema {e['file']} "
              f"({src['repository']}@{src['commit'][:12]} {src['path']}); "
              f"{crd_schema.count_cel(e['openAPIV3Schema'])} CEL rules not evaluated")
    print(f"{len(docs)} objects in {len(files)} files, {len(rendered)} rendered by kustomize; "
          f"{len(flags)} server flags, {len(metrics)} metric series names")
    for f in failures:
        print("FAIL: " + f)
    if failures:
        return 1
    print("OK: deploy/kserve validates strictly and agrees with the server")
    return 0


if __name__ == "__main__":
    sys.exit(main())
