#!/usr/bin/python3
"""Issue 26's goal table in one command (docs/performance.md): starts its own servers on loopback
(the shipped defaults plus whatever follows `--`), runs every measurement once and prints the table
with the same run's ceiling (one core's fp32 matmul rate, measured by mha-client in that run) and
the machine's load average before and after.

    bench/run_all.sh                       # ~2 min on 2 cores
    bench/run_all.sh --quick               # shorter runs, 128-token sequences (a smoke run)
    bench/run_all.sh --device cuda --dtype float16   # both sides on the GPU (scripts/gpu-check.sh)
    bench/run_all.sh --rows c32,decode64   # some rows only
    bench/run_all.sh -- --instances 2      # extra mha-server flags (both servers)
Rows: echo, c32, c1, big, decode64, long, batching. Speed is measured here, never asserted: the
exit code is 0 when every run answered without errors, whatever the table says.
"""
import argparse, json, os, re, subprocess, sys, tempfile, time, urllib.request

ROWS = ["echo", "c32", "c1", "big", "decode64", "long", "batching"]
p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
p.add_argument("--build", default=os.environ.get("MHA_BUILD_DIR", "build"))
p.add_argument("--dur", type=float, default=5.0, help="seconds per timed bench run")
p.add_argument("--quick", action="store_true", help="--dur 1.5, 128-token sequences")
p.add_argument("--long-tokens", type=int, default=512, help="the session vs stateless row")
p.add_argument("--device", default=None)
p.add_argument("--dtype", default=None)
p.add_argument("--rows", default=",".join(ROWS))
p.add_argument("--json", default=None, help="also write the results here")
p.add_argument("server_args", nargs="*")
a, extra = p.parse_known_args()
a.server_args += [x for x in extra if x != "--"]
if a.quick:
    a.dur, a.long_tokens = min(a.dur, 1.5), min(a.long_tokens, 128)
rows = [r for r in a.rows.split(",") if r]
for r in rows:
    if r not in ROWS:
        sys.exit(f"unknown row {r!r}; rows: {','.join(ROWS)}")
client = os.path.join(a.build, "client", "mha-client")
server_bin = os.path.join(a.build, "server", "mha-server")
echo_bin = os.path.join(a.build, "bench", "mha_echo_floor")
placement = []
for flag, value in (("--device", a.device), ("--dtype", a.dtype)):
    if value:
        placement += [flag, value]
dur = f"{a.dur:g}"
failures = []


def loadavg():
    return open("/proc/loadavg").read().split()[:3]


def run_json(args):
    r = subprocess.run(args, capture_output=True, text=True)
    try:
        out = json.loads(r.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        failures.append(f"{' '.join(args[:6])}...: rc {r.returncode}: {r.stderr.strip()[-400:]}")
        return None
    if r.returncode != 0:
        failures.append(f"{' '.join(args[:6])}...: rc {r.returncode} "
                        f"({out.get('first_error') or r.stderr.strip()[-200:]})")
    return out


class Server:
    def __init__(self, *flags):
        self.dir = tempfile.mkdtemp(prefix="mha-run-all-")
        port_file = os.path.join(self.dir, "port")
        metrics_port_file = os.path.join(self.dir, "metrics-port")
        self.log = open(os.path.join(self.dir, "server.log"), "w")
        self.proc = subprocess.Popen(
            [server_bin, "--grpc-address", "127.0.0.1:0", "--http-address", "",  # REST off
             "--port-file", port_file, "--metrics-address", "127.0.0.1:0",
             "--metrics-port-file", metrics_port_file,
             "--log-level", "warn", *placement, *flags, *a.server_args],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 300
        while not (os.path.exists(port_file) and open(port_file).read().endswith("\n")):
            if self.proc.poll() is not None or time.time() > deadline:
                sys.exit(f"mha-server did not start: {open(self.log.name).read()[-2000:]}")
            time.sleep(0.1)
        self.target = "127.0.0.1:" + open(port_file).read().strip()
        while subprocess.run([client, "-a", self.target, "health"], capture_output=True).returncode:
            if self.proc.poll() is not None or time.time() > deadline:
                sys.exit(f"mha-server never said SERVING: {open(self.log.name).read()[-2000:]}")
            time.sleep(0.2)
        self.pid = self.proc.pid
        self.metrics_url = f"http://127.0.0.1:{open(metrics_port_file).read().strip()}/metrics"

    def stages(self):
        """The server's per-stage sums (mha_request_stage_seconds_total) and their count."""
        text = urllib.request.urlopen(self.metrics_url, timeout=10).read().decode()
        out = {}
        for m in re.finditer(r'^mha_request_stage_seconds_total\{model="default",stage="(\w+)"\} '
                             r'(\S+)$', text, re.M):
            out[m.group(1)] = float(m.group(2))
        m = re.search(r'^mha_staged_requests_total\{model="default"\} (\S+)$', text, re.M)
        out["_n"] = float(m.group(1)) if m else 0.0
        return out

    def bench_staged(self, name, *args):
        """bench(), plus the mean per-stage server time (µs) of the requests it sent."""
        before = self.stages()
        r = self.bench(*args)
        after = self.stages()
        n = after["_n"] - before["_n"]
        if r and n > 0:
            res[f"{name}_stages_us"] = {k: (after[k] - before.get(k, 0)) / n * 1e6
                                        for k in after if k != "_n"}
        return r

    def bench(self, *args):
        return run_json([client, "-a", self.target, "bench", *args, "--server-pid", str(self.pid),
                         "--json"])

    def decode(self, *args):
        return run_json([client, "-a", self.target, "decode", *args, "--server-pid",
                         str(self.pid), "--json"])

    def stop(self):
        self.proc.terminate()
        self.proc.wait()
        self.log.close()


def local(*args):
    return run_json([client, "local-bench", *args, *placement, "--threads", "1", "-d", dur,
                     "--json"])


res = {"load_before": loadavg(), "device": a.device or "cpu", "dtype": a.dtype or "float32",
       "server_args": a.server_args, "dur_s": a.dur}
if "echo" in rows or "c1" in rows:
    e = run_json([echo_bin, "-c", "1", "-n", str(int(2000 if a.quick else 6000)), "--json"])
    if e:
        r = e["report"]
        res["echo_p50_us"] = r["latency_us"]["p50"]
        res["echo_cpu_us"] = r["server_cpu"]["cpu_us_per_request"]

on = Server()
small = ["-b", "1", "-t", "16"]
if "c32" in rows:
    r = on.bench_staged("c32", *small, "-c", "32", "-d", dur)
    if r:
        c = r["server_cpu"]
        res.update(c32_rps=r["throughput_rps"], c32_cpu_us=c["cpu_us_per_request"],
                   c32_efficiency=c["efficiency"], matmul_gflops=c["matmul_flops_per_s"] / 1e9,
                   small_mflop=c["flops_per_request"] / 1e6)
if "c1" in rows:
    s, l = on.bench_staged("c1", *small, "-c", "1", "-d", dur), local(*small)
    if s and l:
        res.update(c1_served_p50_us=s["latency_us"]["p50"], c1_local_p50_us=l["latency_us"]["p50"],
                   c1_cpu_us=s["server_cpu"]["cpu_us_per_request"])
        res["c1_added_us"] = res["c1_served_p50_us"] - res["c1_local_p50_us"]
if "big" in rows:
    big = ["-b", "8", "-t", "128"]
    s, l = on.bench(*big, "-c", "2", "-d", dur), local(*big)
    if s and l:
        res.update(big_served_rps=s["throughput_rps"], big_local_rps=l["throughput_rps"],
                   big_efficiency=s["server_cpu"]["efficiency"])
        res["big_ratio"] = s["throughput_rps"] / l["throughput_rps"]
if "decode64" in rows:
    d = on.decode("--sessions", "64", "--tokens", "64")
    if d:
        c = d["server_cpu"]
        res.update(decode64_steps_per_s=d["steps_per_s"], decode64_cpu_us=c["cpu_us_per_step"],
                   decode64_efficiency=c["efficiency"])
if "long" in rows:
    n = str(a.long_tokens)
    s = on.decode("--sessions", "1", "--tokens", n)
    t = on.decode("--sessions", "1", "--tokens", n, "--stateless")
    if s and t:
        res.update(long_session_s=s["seconds"], long_stateless_s=t["seconds"],
                   long_ratio=t["seconds"] / s["seconds"], long_tokens=a.long_tokens)
if "batching" in rows:
    # Each server first serves the same load once, untimed: a new merged batch size costs a GPU
    # its first pass's kernel setup (cuDNN's plan per shape, a CUDA graph's capture), seconds in
    # all on an H100, which a short timed run would otherwise count (docs/gpu_leases.md).
    on.bench(*small, "-c", "64", "-d", "1")
    r = on.bench(*small, "-c", "64", "-d", dur)
    on.stop()
    off = Server("--batching", "off")
    off.bench(*small, "-c", "64", "-d", "1")
    o = off.bench(*small, "-c", "64", "-d", dur)
    off.stop()
    if r and o:
        res.update(batch_on_rps=r["throughput_rps"], batch_off_rps=o["throughput_rps"],
                   batch_on_cpu_us=r["server_cpu"]["cpu_us_per_request"],
                   batch_off_cpu_us=o["server_cpu"]["cpu_us_per_request"])
        res["batch_ratio"] = r["throughput_rps"] / o["throughput_rps"]
else:
    on.stop()
res["load_after"] = loadavg()


def g(key, fmt):
    return fmt.format(res[key]) if key in res else "—"


def met(key, ok):
    return ("yes" if ok(res[key]) else "no") if key in res else "—"


echo_goal = res.get("echo_p50_us", 0) + 50
table = [
    ("c32 small: server CPU per request vs its FLOPs at one core's matmul rate",
     g("c32_efficiency", "{:.0%}") + (f" ({res['c32_cpu_us']:.0f} µs CPU/req, "
                                      f"{res['small_mflop']:.1f} MFLOP = "
                                      f"{res['small_mflop'] * 1e3 / res['matmul_gflops']:.0f} µs "
                                      f"at the ceiling; {res['c32_rps']:.0f} req/s)"
                                      if "c32_cpu_us" in res and res.get("matmul_gflops") else ""),
     "≥ 80%", met("c32_efficiency", lambda v: v >= 0.8)),
    ("small added p50, C++ client, c=1 (served − in-process)",
     g("c1_added_us", "{:+.0f} µs") + (f" ({res['c1_served_p50_us']:.0f} − "
                                       f"{res['c1_local_p50_us']:.0f}; server "
                                       f"{res['c1_cpu_us']:.0f} µs CPU/req)"
                                       if "c1_added_us" in res else ""),
     f"≤ echo floor + 50 = {echo_goal:.0f} µs" if "echo_p50_us" in res else "≤ echo floor + 50 µs",
     met("c1_added_us", lambda v: "echo_p50_us" in res and v <= echo_goal)),
    ("big served / in-process core (B=8 T=128, C++ client)",
     g("big_ratio", "{:.2f}") + (f" ({res['big_served_rps']:.1f} / {res['big_local_rps']:.1f} "
                                 f"passes/s; efficiency {res['big_efficiency']:.0%})"
                                 if "big_ratio" in res else ""),
     "≥ 0.95", met("big_ratio", lambda v: v >= 0.95)),
    ("decode, 64 sessions × 64 steps: server CPU per step",
     g("decode64_cpu_us", "{:.0f} µs") + (f" ({res['decode64_steps_per_s']:.0f} steps/s; "
                                          f"efficiency {res['decode64_efficiency']:.0%})"
                                          if "decode64_cpu_us" in res else ""),
     "≤ 100 µs", met("decode64_cpu_us", lambda v: v <= 100)),
    (f"{a.long_tokens}-token session vs stateless (total time)",
     g("long_ratio", "{:.1f}×") + (f" ({res['long_stateless_s']:.2f} s / "
                                   f"{res['long_session_s']:.2f} s)" if "long_ratio" in res else ""),
     "≥ 25×", met("long_ratio", lambda v: v >= 25)),
    ("batching on vs off, 64 clients of B=1,T=16",
     g("batch_ratio", "{:.2f}×") + (f" ({res['batch_on_rps']:.0f} / {res['batch_off_rps']:.0f} "
                                    f"req/s; CPU/req {res['batch_on_cpu_us']:.0f} / "
                                    f"{res['batch_off_cpu_us']:.0f} µs)"
                                    if "batch_ratio" in res else ""),
     "≥ 1.5×", met("batch_ratio", lambda v: v >= 1.5)),
]
print(f"# issue 26 goal table — {res['device']} {res['dtype']}, one run each, {a.dur:g} s per "
      f"bench run; load average {' '.join(res['load_before'])} before, "
      f"{' '.join(res['load_after'])} after")
if "matmul_gflops" in res:
    print(f"# ceiling (same run): one core's fp32 matmul 512³ = {res['matmul_gflops']:.1f} GFLOP/s "
          f"(mha-client, BLAS at one thread)")
if "echo_p50_us" in res:
    print(f"# echo floor (same gRPC stack, 32 KiB each way, no compute): p50 "
          f"{res['echo_p50_us']:.0f} µs, server CPU {res['echo_cpu_us']:.0f} µs per request")
print("| figure | measured | goal | met |")
print("|---|---|---|---|")
for figure, value, goal, ok in table:
    print(f"| {figure} | {value} | {goal} | {ok} |")
STAGES = ["decode", "queue", "merge", "forward", "split", "handoff", "respond"]
staged = [k for k in ("c1", "c32") if f"{k}_stages_us" in res]
if staged:
    print("\n# where a small request's time goes in the server (mean µs per request, from "
          "mha_request_stage_seconds_total; gRPC's parse and send are outside: see the echo floor)")
    print("| stage | " + " | ".join(staged) + " |")
    print("|---|" + "---|" * len(staged))
    for st in STAGES:
        print(f"| {st} | " + " | ".join(f"{res[k + '_stages_us'].get(st, 0):.0f}" for k in staged)
              + " |")
    print("| server CPU per request | " + " | ".join(
        f"{res[k + '_cpu_us']:.0f}" if f"{k}_cpu_us" in res else "—" for k in staged) + " |")
for f in failures:
    print(f"# error: {f}")
if a.json:
    json.dump(res, open(a.json, "w"), indent=1)
sys.exit(1 if failures else 0)
