#!/usr/bin/python3
"""Every metric the deploy/ artefacts query is one a running mha-server exports.

Starts the built mha-server on loopback (gRPC and metrics on port 0, ports read back from
--port-file / --metrics-port-file) with a one-model repository, sends a few requests with the built
mha-client (successful ones and one for an unknown model, so that counters and histograms have
series), checks /healthz and /readyz (the image's HEALTHCHECK), scrapes /metrics and compares:
every name found in the Grafana dashboard, the alerting rules, the prometheus-adapter rules, the
HPA and the KEDA ScaledObject's triggers (tests/deploy/promql_names.py) must be a series the server exposes. Exceptions, named: `up`
(made by Prometheus itself) and, on a CPU-only server, the CUDA-only mha_gpu_* gauges of the
metrics contract. Stops the server by PID.

  check_metric_names.py --server build/server/mha-server --client build/client/mha-client \
      --repo . --work-dir DIR
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import promql_names  # noqa: E402
import procs  # noqa: E402

# Made by Prometheus, not by the server.
PROMETHEUS_SYNTHETIC = {"up", "scrape_duration_seconds", "scrape_samples_scraped",
                        "scrape_samples_post_metric_relabeling", "scrape_series_added", "ALERTS",
                        "ALERTS_FOR_STATE"}
# The contract's CUDA-only gauges: allowed absent when the server runs without CUDA.
GPU_ONLY = {"mha_gpu_memory_allocated_bytes", "mha_gpu_memory_reserved_bytes"}
# The whole contract, for the report (a missing one that nothing queries is only listed).
CONTRACT = {
    "mha_requests_total": "counter", "mha_request_duration_seconds": "histogram",
    "mha_queue_duration_seconds": "histogram", "mha_compute_duration_seconds": "histogram",
    "mha_batch_size": "histogram", "mha_batch_rows": "histogram", "mha_batch_tokens": "histogram",
    "mha_padding_efficiency": "histogram", "mha_real_tokens_total": "counter",
    "mha_padded_tokens_total": "counter", "mha_queue_depth": "gauge",
    "mha_inflight_requests": "gauge", "mha_model_loaded": "gauge", "mha_build_info": "gauge",
    "process_resident_memory_bytes": "gauge", "process_cpu_seconds_total": "counter",
}
SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count", "")}


def parse_exposition(text):
    """(sample names, {family: type}, samples as (name, labels-string, value))."""
    samples, types, rows = set(), {}, []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            parts = line.split()
            if len(parts) >= 4:
                types[parts[2]] = parts[3]
            continue
        if not line.strip() or line.startswith("#"):
            continue
        m = re.match(r"([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if not m:
            raise ValueError(f"not Prometheus text format: {line!r}")
        samples.add(m.group(1))
        rows.append((m.group(1), m.group(2) or "", m.group(3)))
    return samples, types, rows


def exported(name, samples, types):
    """True when `name` is a series name the server exposes (or declares and could expose)."""
    if name in samples:
        return True
    if types.get(name) in ("counter", "gauge", "untyped"):
        return True
    for family, kind in types.items():
        for suffix in SUFFIXES.get(kind, ()):
            if suffix and name == family + suffix:
                return True
        if kind == "counter" and name == family + "_total":  # OpenMetrics-style TYPE line
            return True
    return False


def wait_for_file(path, proc, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(path) and open(path).read().strip():
            return open(path).read().strip()
        if proc.poll() is not None:
            return None
        time.sleep(0.1)
    return None


def http_get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--client", required=True)
    ap.add_argument("--repo", required=True, help="repository root")
    ap.add_argument("--work-dir", required=True)
    ap.add_argument("--fixture", default="tests/fixtures/cases/format_safetensors")
    args = ap.parse_args()

    promql_names.self_test()
    used, recorded = promql_names.collect(args.repo)
    if len(used) < 10:
        print(f"FAIL: only {len(used)} metric names found in the deploy/ artefacts: "
              "the extraction is broken")
        return 1
    print(f"{len(used)} metric names referenced by the dashboard, rules, adapter rules, HPA and KEDA triggers")

    # A one-model repository: model "example" (the image's example model).
    work = os.path.abspath(args.work_dir)
    shutil.rmtree(work, ignore_errors=True)
    model_dir = os.path.join(work, "models", "example")
    os.makedirs(model_dir)
    for fn in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(args.repo, args.fixture, fn), model_dir)
    port_file = os.path.join(work, "grpc.port")
    metrics_port_file = os.path.join(work, "metrics.port")
    log_path = os.path.join(work, "server.log")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MHA_")}
    cmd = [args.server, "--grpc-address", "127.0.0.1:0", "--port-file", port_file,
           "--metrics-address", "127.0.0.1:0", "--metrics-port-file", metrics_port_file,
           "--http-address", "127.0.0.1:0",
           "--model-repository", os.path.join(work, "models"), "--log-level", "info"]
    print("starting: " + " ".join(cmd))
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        return check_server(args, proc, port_file, metrics_port_file, log_path, used, recorded, env)
    finally:
        procs.stop(proc, timeout=30)
        log.close()


def server_log(path):
    with open(path, errors="replace") as f:
        return f.read()[-4000:]


def check_server(args, proc, port_file, metrics_port_file, log_path, used, recorded, env):
    grpc_port = wait_for_file(port_file, proc, 120)
    metrics_port = wait_for_file(metrics_port_file, proc, 30) if grpc_port else None
    if not grpc_port or not metrics_port:
        print("FAIL: mha-server did not start with a metrics endpoint (the metrics contract: "
              "--metrics-address, --metrics-port-file); "
              f"exit code {proc.poll()}, log:\n{server_log(log_path)}")
        return 1
    target = f"127.0.0.1:{grpc_port}"
    base = f"http://127.0.0.1:{metrics_port}"
    print(f"server up: gRPC {target}, metrics {base}")

    def client(*a, expect_ok=True):
        r = subprocess.run([args.client, "--target", target, *a], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, env=env, timeout=120)
        if (r.returncode == 0) != expect_ok:
            raise SystemExit(f"FAIL: mha-client {' '.join(a)}: exit {r.returncode}\n{r.stdout}")
    client("forward", "--model", "example", "--batch", "2", "--seq", "8")
    client("forward", "--model", "example", "--batch", "1", "--seq", "5", "--kv-seq", "7",
           "--need-weights")
    client("forward", "--batch", "3", "--seq", "4", "--causal")
    client("forward", "--model", "no-such-model", "--batch", "1", "--seq", "2", expect_ok=False)

    failures = []
    for path in ("/healthz", "/readyz"):
        status, body = http_get(base + path)
        print(f"GET {path}: {status}")
        if status != 200:
            failures.append(f"GET {path} answered {status} with the model loaded: {body[:200]}")
    status, text = http_get(base + "/metrics")
    if status != 200:
        print(f"FAIL: GET /metrics answered {status}: {text[:500]}")
        return 1
    samples, types, rows = parse_exposition(text)
    print(f"/metrics: {len(samples)} series names, {len(types)} TYPE lines")
    if not any(n == "mha_requests_total" and 'model="example"' in labels
               for n, labels, _ in rows):
        failures.append('no mha_requests_total{model="example"} after 3 successful requests')

    device_cuda = any(n == "mha_build_info" and re.search(r'device="cuda', labels)
                      for n, labels, _ in rows)
    for name in sorted(used):
        where = "; ".join(sorted(set(used[name]))[:4])
        if name in PROMETHEUS_SYNTHETIC or name in recorded:
            continue
        if exported(name, samples, types):
            continue
        if name in GPU_ONLY and not device_cuda:
            print(f"  allowed absent on a CPU server: {name}")
            continue
        if name in types and types[name] in SUFFIXES:
            failures.append(f"{name} is a {types[name]} family: query {name}_bucket/_sum/_count "
                            f"(used in {where})")
        else:
            failures.append(f"{name} is not exported by mha-server (used in {where})")

    missing_contract = [n for n, kind in CONTRACT.items()
                        if not exported(n if kind != "histogram" else n + "_bucket", samples, types)]
    if missing_contract:
        print("note: contract metrics not exported (nothing checked queries them unless listed "
              "below): " + ", ".join(missing_contract))
    for f in failures:
        print("FAIL: " + f)
    if failures:
        return 1
    print(f"OK: all {len(used)} referenced metric names are exported by mha-server")
    return 0


if __name__ == "__main__":
    sys.exit(main())
