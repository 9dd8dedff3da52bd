#!/usr/bin/python3
"""The shared KV store's costs (docs/scale-out.md), one run each, on loopback:

  handover   two mha-server replicas (the built-in model: E=512, H=8, float32) on one redis-server;
             N sessions of --tokens tokens opened and prefilled on replica A; each then stepped once
             on replica B, which asks A to release it and restores it: the step's time minus a
             steady step's on B is the handover (release + restore); bytes moved (A's
             mha_kv_store_bytes_written_total during the releases, B's bytes_read_total) and the
             store's throughput (bytes / handover).
  decode     `mha-client decode --sessions 1 --prefill 1 --tokens 64 --json` against one replica,
             server CPU per step (process_cpu_seconds_total), without --kv-store, with it, and with
             --kv-store-write-behind: what durability costs.

    client/python/gen_stubs.sh
    bench/kv_store_bench.py --build build --out bench/results/DATE-kv-store
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "client",
                                "python"))
import grpc  # noqa: E402
from mha.v1 import attention_pb2, attention_pb2_grpc  # noqa: E402
from mha_client_example import to_wire  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(what, cond, timeout=120):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return
        time.sleep(0.05)
    raise RuntimeError(f"waited {timeout} s for {what}")


class Redis:
    def __init__(self, work):
        self.port = free_port()
        conf = os.path.join(work, "redis.conf")
        with open(conf, "w") as f:
            f.write(f"bind 127.0.0.1\nport {self.port}\ndir {work}\nsave \"\"\n"
                    f"logfile {work}/redis.log\n")
        self.proc = subprocess.Popen(["redis-server", conf])
        wait("redis", lambda: subprocess.run(["redis-cli", "-p", str(self.port), "ping"],
                                             capture_output=True).stdout.strip() == b"PONG")

    def url(self):
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


class Server:
    def __init__(self, binary, work, name, flags):
        self.port, self.metrics = free_port(), free_port()
        self.log = open(os.path.join(work, name + ".log"), "w")
        self.proc = subprocess.Popen(
            [binary, "--grpc-address", f"127.0.0.1:{self.port}", "--metrics-address",
             f"127.0.0.1:{self.metrics}", "--http-address", "", "--instances", "1"] + flags,
            stdout=self.log, stderr=subprocess.STDOUT)
        wait(name + " ready", self.ready)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}",
                                             options=[("grpc.max_receive_message_length", -1)])
        self.stub = attention_pb2_grpc.AttentionServiceStub(self.channel)

    def ready(self):
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{self.metrics}/readyz").status == 200
        except OSError:
            return False

    def metric(self, name):
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics}/metrics").read().decode()
        m = re.search(r"^" + re.escape(name) + r"\s+([0-9.e+-]+)$", text, re.M)
        return float(m.group(1)) if m else 0.0

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait()


def step(stub, sid, x):
    t0 = time.perf_counter()
    answer = stub.Forward(attention_pb2.ForwardRequest(session_id=sid, query=to_wire(x)),
                          metadata=[("x-session-id", sid)])
    return time.perf_counter() - t0, answer


def handover(args, work, redis):
    flags = ["--kv-store", redis.url(), "--kv-block-tokens", "16", "--max-sequence-length",
             str(args.tokens + 16)]
    a = Server(args.server, work, "replica-a", flags)
    b = Server(args.server, work, "replica-b", flags)
    torch.manual_seed(0)
    rows = []
    try:  # the replicas stop whatever happens (a failed step leaves no server behind)
        written0, read0 = a.metric("mha_kv_store_bytes_written_total"), 0.0
        for i in range(args.sessions):
            sid = f"bench-{i}"
            a.stub.OpenSession(attention_pb2.OpenSessionRequest(batch_size=1, session_id=sid,
                                                                max_tokens=args.tokens + 16),
                               metadata=[("x-session-id", sid)])
            step(a.stub, sid, torch.randn(1, args.tokens, 512))
            read0 = b.metric("mha_kv_store_bytes_read_total")
            moved_s, answer = step(b.stub, sid, torch.randn(1, 1, 512))  # B asks A, restores
            assert answer.session_tokens == args.tokens + 1, answer.session_tokens
            steady = statistics.median(step(b.stub, sid, torch.randn(1, 1, 512))[0]
                                       for _ in range(5))
            read = b.metric("mha_kv_store_bytes_read_total") - read0
            rows.append({"handover_ms": (moved_s - steady) * 1e3, "step_ms": moved_s * 1e3,
                         "steady_step_ms": steady * 1e3, "bytes_read": read})
            b.stub.CloseSession(attention_pb2.CloseSessionRequest(session_id=sid),
                                metadata=[("x-session-id", sid)])
        written = a.metric("mha_kv_store_bytes_written_total") - written0
    finally:
        a.stop()
        b.stop()
    p50 = statistics.median(r["handover_ms"] for r in rows)
    per_session = statistics.median(r["bytes_read"] for r in rows)
    return {"sessions": args.sessions, "tokens": args.tokens, "embed_dim": 512,
            "handover_ms_p50": p50,
            "handover_ms_max": max(r["handover_ms"] for r in rows),
            "steady_step_ms_p50": statistics.median(r["steady_step_ms"] for r in rows),
            "bytes_moved_per_session": per_session,
            "bytes_written_by_releases": written,
            "store_throughput_mb_per_s": per_session / (p50 / 1e3) / 1e6 * 2,  # written + read
            "runs": rows}


def decode(args, work, redis, flags, name):
    s = Server(args.server, work, name, flags)
    out = subprocess.run([args.client, "-a", f"127.0.0.1:{s.port}", "decode", "--sessions", "1",
                          "--prefill", "1", "--tokens", "64", "--server-pid", str(s.proc.pid),
                          "--json"], capture_output=True, text=True)
    s.stop()
    report = json.loads(out.stdout.strip().splitlines()[-1])
    return {"flags": flags, "cpu_us_per_step": report["server_cpu"]["cpu_us_per_step"],
            "p50_us": report["latency_us"]["p50"], "errors": report["errors"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", required=True)
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=512)
    args = ap.parse_args()
    args.server = os.path.join(args.build, "server", "mha-server")
    args.client = os.path.join(args.build, "client", "mha-client")
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="mha-kv-bench-")
    redis = Redis(work)
    try:
        result = {"handover": handover(args, work, redis)}
        result["decode64"] = [
            decode(args, work, redis, [], "decode-no-store"),
            decode(args, work, redis, ["--kv-store", redis.url()], "decode-store"),
            decode(args, work, redis, ["--kv-store", redis.url(), "--kv-store-write-behind",
                                       "true"], "decode-write-behind")]
    finally:
        redis.stop()
    for f in os.listdir(work):
        if f.endswith(".log"):
            shutil.copy(os.path.join(work, f), args.out)
    with open(os.path.join(args.out, "kv_store_bench.json"), "w") as f:
        json.dump(result, f, indent=2)
    h = result["handover"]
    print(f"handover of a {h['tokens']}-token session (E=512): p50 {h['handover_ms_p50']:.2f} ms "
          f"(max {h['handover_ms_max']:.2f}), {h['bytes_moved_per_session'] / 2**20:.2f} MiB "
          f"moved, store {h['store_throughput_mb_per_s']:.0f} MB/s written+read")
    for d in result["decode64"]:
        print(f"decode64 {' '.join(d['flags']) or '(no store)'}: {d['cpu_us_per_step']:.1f} us "
              f"server CPU per step, p50 {d['p50_us']:.0f} us, {d['errors']} errors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
