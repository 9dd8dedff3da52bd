#!/usr/bin/python3
"""One container of the mha-serve image, run as in production but with a read-only root file
system (--read-only --tmpfs /tmp), ports published on 127.0.0.1 only. Checks from the host:
  - grpc.health.v1 SERVING (the host's mha-client), a Forward equal to the fixture
    (tests/fixtures/cases/format_safetensors/io.safetensors = the image's example model),
    /metrics counting it;
  - the server runs as uid 10001 and cannot write its root file system;
  - Docker's HEALTHCHECK (which follows MHA_METRICS_ADDRESS) reports healthy, also with the
    metrics endpoint moved to another port;
  - `docker stop` under load: exit code 0 within the stop timeout (no SIGKILL) and every call
    a server handler took ended OK (the server's mha_requests_total, polled while it drains, has
    no other code); the client's only errors are calls refused before a handler took them
    (UNAVAILABLE, or CANCELLED when the transport reset the stream during shutdown).
With --quick (the BuildKit-built image): health, Forward, uid and exit code of a plain stop.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time

import ctlib
from ctlib import docker, log

FIXTURE = "tests/fixtures/cases/format_safetensors/io.safetensors"


def start(name, image, *extra):
    ctlib.remove(name)
    docker("run", "-d", "--name", name, "--read-only", "--tmpfs", "/tmp",
           "-p", "127.0.0.1::8500", "-p", "127.0.0.1::8502", *extra, image)
    return ctlib.published(name, 8500), ctlib.published(name, 8502)


def wait_serving(client, grpc_port, name, timeout=180):
    def serving():
        state = docker("inspect", "-f", "{{.State.Status}}", name)
        if state != "running":
            raise SystemExit(f"{name} is {state}:\n" + ctlib.logs(name))
        r = subprocess.run([client, "--target", f"127.0.0.1:{grpc_port}", "--timeout-ms", "2000",
                            "health"], capture_output=True, text=True)
        return r.returncode == 0 and "SERVING" in r.stdout
    ctlib.wait_for(f"{name} SERVING", serving, timeout, interval=0.5)


def check_forward(client, grpc_port, repo, work):
    out = os.path.join(work, "out.safetensors")
    ctlib.run([client, "--target", f"127.0.0.1:{grpc_port}", "forward", "--model", "example",
               "-i", os.path.join(repo, FIXTURE), "--need-weights", "--per-head", "-o", out])
    want = ctlib.read_safetensors(os.path.join(repo, FIXTURE))
    got = ctlib.read_safetensors(out)
    for name in ("output", "attn_weights"):
        d = ctlib.max_abs_diff(got[name], want[name])
        if d > 1e-4:
            raise SystemExit(f"Forward {name} differs from the fixture by {d}")
    log(f"Forward equals the fixture (output and per-head attn_weights, within 1e-4)")


def check_user_and_readonly(name):
    uid = docker("exec", name, "sh", "-c", "awk '/^Uid:/ {print $2}' /proc/1/status")
    if uid != "10001":
        raise SystemExit(f"mha-server runs as uid {uid}, not 10001")
    # As root (uid 10001 may not write there anyway): only a read-only root refuses.
    r = subprocess.run([ctlib.DOCKER, "exec", "-u", "0", name, "touch", "/probe"],
                       capture_output=True, text=True)
    if r.returncode == 0 or "Read-only file system" not in r.stderr:
        raise SystemExit(f"the root file system is writable: {r.returncode} {r.stderr}")
    log("server process uid 10001; root file system read-only (only /tmp is writable)")


def wait_healthy(name, timeout=180):
    # "unhealthy" on the way is tolerated (a loaded machine can time a probe out); the next
    # passing probe makes it healthy.
    try:
        ctlib.wait_for(f"{name} HEALTHCHECK healthy", lambda: docker(
            "inspect", "-f", "{{.State.Health.Status}}", name) == "healthy", timeout, interval=1)
    except RuntimeError as e:
        raise SystemExit(f"{e}: " + docker("inspect", "-f", "{{json .State.Health}}", name))


def stop_under_load(client, grpc_port, metrics_port, name, work):
    before = ctlib.requests_ok(metrics_port)
    bench = subprocess.Popen(
        [client, "--target", f"127.0.0.1:{grpc_port}", "--timeout-ms", "20000", "bench",
         "--model", "example", "--batch", "8", "--seq", "128", "--concurrency", "16",
         "--duration-s", "12", "--warmup", "0", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Stop once the load is on (the server has answered some of it), not after a fixed time.
    try:
        ctlib.wait_for("load on the server", lambda: bench.poll() is None and
                       ctlib.requests_ok(metrics_port) >= before + 50, 60, 0.1)
    except RuntimeError as e:
        if bench.poll() is None:
            bench.kill()
        out, err = bench.communicate()
        raise SystemExit(f"{e}; requests {before} -> {ctlib.requests_ok(metrics_port)}; "
                         f"bench exit {bench.returncode}:\n{out}\n{err}")
    # The server's own counts while it drains (its HTTP endpoint stops last).
    seen, polling = [{}], [True]

    def poll():
        while polling[0]:
            try:
                seen[0] = ctlib.requests_by_code(metrics_port)
            except Exception:  # noqa: BLE001 - stopped: keep the last value
                pass
            time.sleep(0.02)
    poller = threading.Thread(target=poll)
    poller.start()
    t0 = time.monotonic()
    docker("stop", name)  # SIGTERM, SIGKILL after Docker's default 10 s
    stop_s = time.monotonic() - t0
    polling[0] = False
    poller.join()
    out, err = bench.communicate(timeout=120)
    if bench.returncode != 0 and "{" not in out:
        raise SystemExit(f"bench failed ({bench.returncode}): {err[-2000:]}")
    report = ctlib.bench_json(out)
    exit_code = docker("inspect", "-f", "{{.State.ExitCode}}", name)
    logs = ctlib.logs(name)
    # Calls that never reached a handler fail on the client with UNAVAILABLE (refused: GOAWAY,
    # connection refused, after the retries) or CANCELLED (the stream reset by the shutting-down
    # transport before a handler took it). A call a handler took is counted by the server under
    # its status code: all of those must be OK.
    others = {c: n for c, n in report["error_codes"].items() if c not in ("UNAVAILABLE",
                                                                           "CANCELLED")}
    server_ok = seen[0].get("OK", 0) - before
    server_err = {c: n for c, n in seen[0].items() if c != "OK" and n}
    log(f"docker stop under load: {stop_s:.1f} s (CLI wall time), exit code {exit_code}; client: {report['ok']} "
        f"OK, errors {report['error_codes']}; server (last /metrics while draining): "
        f"{server_ok} OK, not OK {server_err or 0}")
    if server_err or server_ok > report["ok"]:
        raise SystemExit(f"calls the server took did not all end OK: {seen[0]}")
    if exit_code != "0":
        raise SystemExit(f"exit code {exit_code} after docker stop\n{logs[-3000:]}")
    if "mha-server stopped" not in logs:  # exit code 0 already rules out SIGKILL (137)
        raise SystemExit(f"no clean stop in the server's log:\n{logs[-3000:]}")
    if others or report["ok"] == 0:
        raise SystemExit(f"accepted calls not answered OK: {report}\n{err[-2000:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--image", required=True)
    ap.add_argument("--client", required=True, help="the host's mha-client")
    ap.add_argument("--repo", required=True)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    name = "mha-ct-single"
    work = tempfile.mkdtemp(prefix="mha-ct-")
    try:
        user = docker("inspect", "-f", "{{.Config.User}}", args.image)
        log(f"{args.image}: USER {user}, size "
            f"{int(docker('inspect', '-f', '{{.Size}}', args.image)) / 1e6:.0f} MB")
        grpc_port, metrics_port = start(name, args.image)
        moved = "mha-ct-moved"
        if not args.quick:
            # HEALTHCHECK follows MHA_METRICS_ADDRESS: metrics moved to 9102, nothing on 8502.
            # Started now, so that its first probe (--interval after the start) is due by the
            # time the checks below are done.
            ctlib.remove(moved)
            docker("run", "-d", "--name", moved, "--read-only", "--tmpfs", "/tmp",
                   "-e", "MHA_METRICS_ADDRESS=0.0.0.0:9102", args.image)
        wait_serving(args.client, grpc_port, name)
        log(f"health SERVING from the host (127.0.0.1:{grpc_port} -> {name}:8500)")
        check_forward(args.client, grpc_port, args.repo, work)
        check_user_and_readonly(name)
        if args.quick:
            docker("stop", name)
            code = docker("inspect", "-f", "{{.State.ExitCode}}", name)
            if code != "0":
                raise SystemExit(f"exit code {code} after docker stop")
            log("docker stop: exit code 0")
            return 0
        status, _ = ctlib.http_get(f"http://127.0.0.1:{metrics_port}/readyz")
        n = ctlib.requests_ok(metrics_port)
        if status != 200 or n < 1:
            raise SystemExit(f"/readyz {status}, mha_requests_total{{code=OK}} {n}")
        log(f"/readyz 200, /metrics mha_requests_total{{code=\"OK\"}} = {n}")
        wait_healthy(name)
        log("HEALTHCHECK healthy (metrics on 8502)")
        stop_under_load(args.client, grpc_port, metrics_port, name, work)
        wait_healthy(moved)
        log("HEALTHCHECK healthy with MHA_METRICS_ADDRESS=0.0.0.0:9102")
        ctlib.remove(moved)
        return 0
    finally:
        ctlib.remove(name, "mha-ct-moved")


if __name__ == "__main__":
    sys.exit(main())
