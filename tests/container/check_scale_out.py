#!/usr/bin/python3
"""Scale-out: two replicas of the image and a Prometheus container (Debian's `prometheus`,
tests/container/prometheus/) on one user-defined Docker network; the host's mha-client reaches
the replicas through their ports published on 127.0.0.1 as one target
`ipv4:127.0.0.1:P1,127.0.0.1:P2` (round_robin + client-side health checking + retries of
UNAVAILABLE, client/channel.h).
  A. load through both replicas: no error; both served; each replica's /metrics
     mha_requests_total{code="OK"} sum to the requests sent; Prometheus shows both targets up and
     the same sum (checked before anything is stopped, so every count can still be scraped).
  B. dns:///mha-serve:8500 from a container on the network (both replicas carry the network
     alias mha-serve): no error, both replicas served.
  C. failover: load, `docker stop` of replica 2 mid-run: no request fails; replica 1's count is
     exact (scraped after the run); replica 2's share is the rest (sent - replica 1), and must
     be >= the last value polled from its /metrics while it drained; Prometheus shows replica 2
     down and replica 1's count.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

import ctlib
from ctlib import docker, log

NET = "mha-ct-net"
R1, R2, PROM = "mha-ct-r1", "mha-ct-r2", "mha-ct-prometheus"
PROM_IMAGE = "mha-ct-prometheus:latest"


def prometheus_context(repo, work):
    src = open(os.path.join(repo, "deploy/prometheus/prometheus.yml")).read()
    adapted = src
    for old, new in (("scrape_interval: 15s", "scrape_interval: 1s"),
                     ("scrape_timeout: 10s", "scrape_timeout: 1s"),
                     ('- targets: ["127.0.0.1:8502"]', f'- targets: ["{R1}:8502", "{R2}:8502"]'),
                     ("env: example", "env: container-tier")):
        if old not in adapted:
            raise SystemExit(f"deploy/prometheus/prometheus.yml no longer has {old!r}: adapt "
                             "check_scale_out.py")
        adapted = adapted.replace(old, new)
    ctx = os.path.join(work, "prometheus")
    shutil.copytree(os.path.join(repo, "tests/container/prometheus"), ctx)
    open(os.path.join(ctx, "prometheus.yml"), "w").write(adapted)
    shutil.copytree(os.path.join(repo, "deploy/prometheus/rules"), os.path.join(ctx, "rules"))
    return ctx


def prom_query(port, q):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    _, body = ctlib.http_get(url)
    data = json.loads(body)
    if data.get("status") != "success":
        raise RuntimeError(f"{q}: {body}")
    return {r["metric"].get("instance", ""): float(r["value"][1]) for r in data["data"]["result"]}


def bench(client, target, *extra):
    return ["--target", target, "--timeout-ms", "20000", "bench", "--model", "example",
            "--warmup", "0", "--concurrency", "8", "--json", *extra]


def check_no_errors(report, what):
    if report["errors"] != 0:
        raise SystemExit(f"{what}: {report['errors']} requests failed: {report}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--image", required=True)
    ap.add_argument("--client", required=True)
    ap.add_argument("--repo", required=True)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="mha-ct-scale-")
    ctlib.remove(R1, R2, PROM)
    docker("network", "rm", NET, check=False)
    try:
        t0 = time.monotonic()
        ctx = prometheus_context(args.repo, work)
        subprocess.run(["nice", "-n", "19", ctlib.DOCKER, "build", "-q", "-t", PROM_IMAGE, ctx],
                       check=True, env={**os.environ, "DOCKER_BUILDKIT": "0"},
                       stdout=subprocess.DEVNULL)
        log(f"Prometheus image built ({time.monotonic() - t0:.0f} s)")
        docker("network", "create", NET)
        ports = {}
        for r in (R1, R2):
            docker("run", "-d", "--name", r, "--network", NET, "--network-alias", "mha-serve",
                   "-p", "127.0.0.1::8500", "-p", "127.0.0.1::8502", args.image)
            ports[r] = (ctlib.published(r, 8500), ctlib.published(r, 8502))
        docker("run", "-d", "--name", PROM, "--network", NET, "-p", "127.0.0.1::9090", PROM_IMAGE)
        pport = ctlib.published(PROM, 9090)
        for r in (R1, R2):
            ctlib.wait_for(f"{r} ready", lambda r=r: ctlib.http_get(
                f"http://127.0.0.1:{ports[r][1]}/readyz")[0] == 200, 180, 0.5)
        ctlib.wait_for("Prometheus: both targets up", lambda: list(prom_query(
            pport, 'up{job="mha-serve"}').values()) == [1.0, 1.0], 120, 1)
        log(f"replicas {R1}, {R2} ready; Prometheus 127.0.0.1:{pport} scrapes both (up=1)")
        target = "ipv4:" + ",".join(f"127.0.0.1:{ports[r][0]}" for r in (R1, R2))

        # A. Both replicas, nothing stopped: exact counts everywhere.
        n_a = 1000
        rep = ctlib.bench_json(ctlib.run([args.client, *bench(args.client, target, "-n",
                                                                str(n_a))]).stdout)
        check_no_errors(rep, "A")
        per = {r: ctlib.requests_ok(ports[r][1]) for r in (R1, R2)}
        log(f"A: {target}: {rep['ok']} sent, 0 failed; served {per}")
        if rep["ok"] != n_a or sum(per.values()) != n_a or min(per.values()) == 0:
            raise SystemExit(f"A: expected {n_a} over both replicas, got {rep['ok']} / {per}")
        q = 'sum by (instance) (mha_requests_total{job="mha-serve",code="OK"})'
        want = {f"{r}:8502": float(per[r]) for r in (R1, R2)}
        ctlib.wait_for("Prometheus: the replicas' counts", lambda: prom_query(pport, q) == want,
                       60, 1)
        log(f"A: Prometheus: both up, mha_requests_total sums to {n_a} ({want})")

        # B. dns:/// from inside the network.
        before = {r: ctlib.requests_ok(ports[r][1]) for r in (R1, R2)}
        out = docker("run", "--rm", "--network", NET, "--entrypoint", "mha-client", args.image,
                     *bench(None, "dns:///mha-serve:8500", "-n", "400"))
        rep = ctlib.bench_json(out)
        check_no_errors(rep, "B")
        delta = {r: ctlib.requests_ok(ports[r][1]) - before[r] for r in (R1, R2)}
        log(f"B: dns:///mha-serve:8500 from the network: {rep['ok']} OK, 0 failed; served {delta}")
        if rep["ok"] != 400 or min(delta.values()) == 0:
            raise SystemExit(f"B: both replicas must serve dns:/// traffic: {rep} {delta}")

        # C. Failover: stop replica 2 in the middle of the run.
        before = {r: ctlib.requests_ok(ports[r][1]) for r in (R1, R2)}
        last_r2 = [before[R2]]
        polling = [True]

        def poll_r2():
            while polling[0]:
                try:
                    last_r2[0] = ctlib.requests_ok(ports[R2][1])
                except Exception:  # noqa: BLE001 - gone: keep the last value
                    pass
                time.sleep(0.05)
        poller = threading.Thread(target=poll_r2)
        poller.start()
        load = subprocess.Popen([args.client, *bench(args.client, target, "--batch", "4",
                                                     "--seq", "64", "--duration-s", "12")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # Stop once both replicas carry the load, not after a fixed time.
        ctlib.wait_for("load on both replicas", lambda: load.poll() is None and all(
            ctlib.requests_ok(ports[r][1]) >= before[r] + 50 for r in (R1, R2)), 60, 0.1)
        docker("stop", R2)
        out, err = load.communicate(timeout=120)
        polling[0] = False
        poller.join()
        rep = ctlib.bench_json(out)
        r1 = ctlib.requests_ok(ports[R1][1]) - before[R1]
        r2_polled = last_r2[0] - before[R2]
        r2 = rep["ok"] - r1
        code = docker("inspect", "-f", "{{.State.ExitCode}}", R2)
        sent = rep["ok"] + rep["errors"]
        log(f"C: failover: {sent} sent, {rep['errors']} failed {rep['error_codes'] or ''}; "
            f"{R1} served {r1} ({100 * r1 / max(1, sent):.1f} %), {R2} {r2} "
            f"({100 * r2 / max(1, sent):.1f} %; last polled before it stopped: {r2_polled}); "
            f"{R2} exit code {code}")
        check_no_errors(rep, "C")
        if r1 <= 0 or r2 <= 0 or r2_polled <= 0 or r2_polled > r2 or code != "0":
            raise SystemExit(f"C: both replicas must have served, {R2} exit 0\n{err[-2000:]}")
        ctlib.wait_for("Prometheus: replica 2 down", lambda: prom_query(
            pport, 'up{job="mha-serve"}').get(f"{R2}:8502") == 0.0, 30, 1)
        total_r1 = float(before[R1] + r1)
        ctlib.wait_for("Prometheus: replica 1's count", lambda: prom_query(pport, q).get(
            f"{R1}:8502") == total_r1, 30, 1)
        scraped_r2 = prom_query(pport, 'max_over_time(mha_requests_total{job="mha-serve",'
                                       f'code="OK",instance="{R2}:8502"}}[10m])')
        log(f"C: Prometheus: {R2} up=0, {R1} count {int(total_r1)}; {R2}'s last scrape "
            f"{scraped_r2} <= its final {before[R2] + r2}")
        return 0
    finally:
        for c in (R1, R2, PROM):
            if os.environ.get("MHA_CONTAINER_KEEP_LOGS"):
                print(ctlib.logs(c))
        ctlib.remove(R1, R2, PROM)
        docker("network", "rm", NET, check=False)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
