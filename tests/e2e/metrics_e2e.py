#!/usr/bin/python3
"""End-to-end: mha-server's metrics as a real Prometheus sees them.

Starts the built mha-server (gRPC and metrics on free loopback ports, written to port files) and
Debian's Prometheus scraping it every second, sends a known number of good requests (closed-loop
bench with mixed lengths, so the dynamic batcher merges them, plus single forwards) and of bad
ones (query with the wrong embedding size -> INVALID_ARGUMENT), waits until Prometheus has
scraped the final counts, then checks the series through Prometheus' HTTP API. Both processes are
stopped by PID (and get SIGKILL through PR_SET_PDEATHSIG should this script die first).

Exit code 0 = pass, 1 = fail, 77 = skipped (no Prometheus binary). Stdlib only.
"""
import argparse
import ctypes
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import loopback_ports  # noqa: E402

GOOD_BENCH = 48  # bench requests (closed loop, 16 in flight)
GOOD_SINGLE = 2  # `mha-client forward` calls
BAD = 3  # INVALID_ARGUMENT calls
SKIP = 77


def die_with_parent():
    """preexec_fn: the child gets SIGKILL when this script exits."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def wait_for_file(path, proc, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(path):
            with open(path) as f:
                text = f.read().strip()
            if text:
                return int(text)
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with code {proc.returncode} before writing {path}")
        time.sleep(0.1)
    raise RuntimeError(f"{what}: no {path} after {timeout} s")


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def write_bad_input(path):
    """A safetensors file whose query is [1, 4, 7]: the wrong E for any test model."""
    header = json.dumps({"query": {"dtype": "F32", "shape": [1, 4, 7],
                                   "data_offsets": [0, 4 * 28]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + struct.pack("<28f", *range(28)))


class Prometheus:
    def __init__(self, url):
        self.url = url

    def query(self, expr):
        """The instant vector of `expr` as a list of (labels, float)."""
        q = urllib.parse.urlencode({"query": expr})
        _, body = http_get(f"{self.url}/api/v1/query?{q}")
        data = json.loads(body)
        if data.get("status") != "success":
            raise RuntimeError(f"query {expr}: {body}")
        return [(r["metric"], float(r["value"][1])) for r in data["data"]["result"]]

    def scalar(self, expr):
        result = self.query(expr)
        return result[0][1] if result else None


def stop(proc, name, log):
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        log(f"{name} (pid {proc.pid}) ignored SIGTERM; SIGKILL")
        proc.kill()
        proc.wait()


def run(args, work):
    log = lambda msg: print(f"[e2e] {msg}", flush=True)  # noqa: E731
    server = prom = None
    failures = []
    try:
        server_log = open(os.path.join(work, "server.log"), "w")
        port_file = os.path.join(work, "grpc.port")
        metrics_port_file = os.path.join(work, "metrics.port")
        server = subprocess.Popen(
            [args.server, "--grpc-address", "127.0.0.1:0", "--port-file", port_file,
             "--metrics-address", "127.0.0.1:0", "--metrics-port-file", metrics_port_file,
             "--http-address", "127.0.0.1:0", "--max-queue-delay-us", "2000"],
            stdout=server_log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        grpc_port = wait_for_file(port_file, server, 120, "mha-server")
        metrics_port = wait_for_file(metrics_port_file, server, 10, "mha-server")
        log(f"mha-server pid {server.pid}: gRPC {grpc_port}, metrics {metrics_port}")
        status, _ = http_get(f"http://127.0.0.1:{metrics_port}/readyz")
        if status != 200:
            failures.append(f"/readyz answered {status}")

        prom_port = loopback_ports.pick_free_port()
        config = os.path.join(work, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: mha\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{metrics_port}']\n")
        prom_log = open(os.path.join(work, "prometheus.log"), "w")
        prom = subprocess.Popen(
            [args.prometheus, f"--config.file={config}",
             f"--storage.tsdb.path={os.path.join(work, 'tsdb')}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=prom_log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        api = Prometheus(f"http://127.0.0.1:{prom_port}")
        deadline = time.time() + 60
        while True:
            try:
                if http_get(f"{api.url}/-/ready")[0] == 200:
                    break
            except OSError:
                pass
            if prom.poll() is not None or time.time() > deadline:
                raise RuntimeError("Prometheus did not become ready (see prometheus.log)")
            time.sleep(0.2)
        log(f"prometheus pid {prom.pid} on {prom_port}")

        target = f"127.0.0.1:{grpc_port}"
        client = [args.client, "--target", target]
        subprocess.run(client + ["bench", "-b", "1", "--seq-min", "8", "--seq-max", "64",
                                 "-c", "16", "-n", str(GOOD_BENCH), "--warmup", "0"],
                       check=True, timeout=300)
        for i in range(GOOD_SINGLE):
            subprocess.run(client + ["forward", "-b", "2", "-t", str(5 + i)], check=True,
                           timeout=120, stdout=subprocess.DEVNULL)
        bad_input = os.path.join(work, "bad.safetensors")
        write_bad_input(bad_input)
        for _ in range(BAD):
            r = subprocess.run(client + ["forward", "-i", bad_input], timeout=120,
                               capture_output=True, text=True)
            if r.returncode == 0 or "INVALID_ARGUMENT" not in r.stderr:
                failures.append(f"bad request: rc {r.returncode}, stderr {r.stderr.strip()}")

        good = GOOD_BENCH + GOOD_SINGLE
        ok_expr = 'sum(mha_requests_total{code="OK"})'
        deadline = time.time() + 60
        while time.time() < deadline:  # until a scrape after the last request
            if (api.scalar(ok_expr) == good and
                    api.scalar('sum(mha_requests_total{code="INVALID_ARGUMENT"})') == BAD):
                break
            time.sleep(0.5)
        time.sleep(2.5)  # a couple more scrapes: values must stay put

        def check(name, expr, want):
            got = api.scalar(expr)
            ok = want(got) if callable(want) else got == want
            log(f"{'ok  ' if ok else 'FAIL'} {name}: {expr} = {got}")
            if not ok:
                failures.append(f"{name}: {expr} = {got}")

        check("OK requests", ok_expr, good)
        check("INVALID_ARGUMENT requests",
              'sum(mha_requests_total{code="INVALID_ARGUMENT"})', BAD)
        check("request duration count", "sum(mha_request_duration_seconds_count)", good + BAD)
        check("queue duration count", "sum(mha_queue_duration_seconds_count)",
              lambda v: v is not None and v >= good)
        check("compute duration count", "sum(mha_compute_duration_seconds_count)",
              lambda v: v is not None and v >= good)
        check("batch size count", "sum(mha_batch_size_count)", lambda v: v is not None and v > 0)
        check("requests in batches", "sum(mha_batch_size_sum)", good)
        check("padding efficiency", "sum(mha_padding_efficiency_count)",
              lambda v: v is not None and v > 0)
        check("padding efficiency ratio",
              "sum(mha_real_tokens_total) / sum(mha_padded_tokens_total)",
              lambda v: v is not None and 0 < v <= 1)
        check("model loaded", 'mha_model_loaded{model="default"}', 1)
        check("in flight", "sum(mha_inflight_requests)", 0)
        check("queue depth", "sum(mha_queue_depth)", 0)
        check("build info", "count(mha_build_info)", 1)
        check("resident memory", "process_resident_memory_bytes", lambda v: v and v > 50e6)
        check("cpu seconds", "process_cpu_seconds_total", lambda v: v and v > 0)
        check("target up", 'up{job="mha"}', 1)
    except Exception as e:  # noqa: BLE001 -- report anything, then clean up
        failures.append(f"{type(e).__name__}: {e}")
    finally:
        stop(prom, "prometheus", log)
        stop(server, "mha-server", log)
    for proc, name in ((server, "mha-server"), (prom, "prometheus")):
        if proc is not None and proc.poll() is None:
            failures.append(f"{name} pid {proc.pid} still running")
        elif proc is not None and name == "mha-server" and proc.returncode != 0:
            failures.append(f"mha-server exited with {proc.returncode}")
    if failures:
        for name in ("server.log", "prometheus.log"):
            path = os.path.join(work, name)
            if os.path.exists(path):
                with open(path) as f:
                    tail = f.read()[-4000:]
                print(f"----- {name} (tail)\n{tail}", flush=True)
        for f in failures:
            log(f"FAILED: {f}")
        return 1
    log("PASS")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True)
    parser.add_argument("--client", required=True)
    parser.add_argument("--prometheus", default="/usr/bin/prometheus")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args()
    if not os.access(args.prometheus, os.X_OK):
        print(f"[e2e] SKIP: no Prometheus at {args.prometheus} (apt-get install prometheus)")
        return SKIP
    work = tempfile.mkdtemp(prefix="mha-e2e-")
    try:
        return run(args, work)
    finally:
        if args.keep:
            print(f"[e2e] work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
