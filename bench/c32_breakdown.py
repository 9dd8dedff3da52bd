#!/usr/bin/python3
"""The c32 small request's breakdown, before/after in one run (docs/performance.md, "Where a
request's server CPU goes"): starts every given mha-server binary on loopback (built-in model, shipped defaults plus
the flags after `--`), then, round after round, drives each in turn with `mha-client bench -b 1
-t 16 -c 32` (server CPU per request from /proc/PID/stat, efficiency against one core's matmul
rate measured in the same run) and prints the medians. With --perf it then records each server
under the same load with `perf record -e cpu-clock --call-graph dwarf` and splits its CPU into
stages (bench/cpu_breakdown.py), in µs per request at that server's median CPU per request.

    bench/c32_breakdown.py                                   # build/server/mha-server
    bench/c32_breakdown.py --perf /tmp/before/mha-server build/server/mha-server
    bench/c32_breakdown.py --rounds 5 --dur 4 -- --blas-threads 1
Speed is measured here, never asserted.
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from mha_bench import Server, loadavg, run_json  # noqa: E402

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
p.add_argument("servers", nargs="*", help="mha-server binaries (default: BUILD/server/mha-server)")
p.add_argument("--build", default=os.environ.get("MHA_BUILD_DIR", "build"))
p.add_argument("--rounds", type=int, default=3)
p.add_argument("--dur", type=float, default=4.0, help="seconds per timed bench run")
p.add_argument("--perf", action="store_true", help="also profile each server (perf record)")
p.add_argument("--perf-s", type=float, default=8.0, help="seconds recorded per server")
p.add_argument("--json", default=None, help="also write the results here")
a, extra = p.parse_known_args()
flags = [x for x in extra if x != "--"]
client = os.path.join(a.build, "client", "mha-client")
servers = a.servers or [os.path.join(a.build, "server", "mha-server")]


def bench(server, dur):
    failures = []
    out = run_json(server.mha_client("bench", "-b", "1", "-t", "16", "-c", "32", "-d", f"{dur:g}",
                                     "--server-pid", str(server.pid), "--json"), failures)
    if failures or out.get("errors"):
        sys.exit(f"bench failed: {failures or out.get('first_error')}")
    return out


def profile(server, cpu_us, label):
    data = tempfile.mktemp(prefix="mha-c32-perf-")
    load = subprocess.Popen(server.mha_client("bench", "-b", "1", "-t", "16", "-c", "32",
                                              "-d", f"{a.perf_s + 3:g}", "--json"),
                            stdout=subprocess.DEVNULL)
    time.sleep(1.5)
    subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", "499", "--call-graph",
                    "dwarf,16384", "-p", str(server.pid), "-o", data, "--", "sleep",
                    f"{a.perf_s:g}"], check=True, stderr=subprocess.DEVNULL)
    load.wait()
    script = subprocess.Popen(["perf", "script", "-i", data, "-F",
                               "comm,tid,period,event,ip,sym,dso"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    r = subprocess.run([sys.executable, os.path.join(HERE, "cpu_breakdown.py"), "--json",
                        "--cpu-us", str(cpu_us), "--label", label],
                       stdin=script.stdout, capture_output=True, text=True, check=True)
    script.wait()
    os.unlink(data)
    return json.loads(r.stdout)


res = {"load_before": " ".join(loadavg()), "servers": servers, "flags": flags,
       "rounds": a.rounds}
running = [Server(s, client, flags) for s in servers]  # stopped at exit, whatever happens
for server in running:  # warm: the first passes of each batch size, the estimator
    bench(server, 1)
samples = [[] for _ in servers]
for _ in range(a.rounds):
    for i, server in enumerate(running):
        samples[i].append(bench(server, a.dur))
med = []
for i, s in enumerate(servers):
    cpu = statistics.median(x["server_cpu"]["cpu_us_per_request"] for x in samples[i])
    eff = statistics.median(x["server_cpu"]["efficiency"] for x in samples[i])
    rps = statistics.median(x["throughput_rps"] for x in samples[i])
    gflops = statistics.median(x["server_cpu"]["matmul_flops_per_s"] for x in samples[i]) / 1e9
    med.append({"server": s, "cpu_us": cpu, "efficiency": eff, "rps": rps, "gflops": gflops})
if a.perf:
    for i, server in enumerate(running):
        med[i]["breakdown"] = profile(server, med[i]["cpu_us"], servers[i])
for server in running:
    server.stop()
res["load_after"] = " ".join(loadavg())
res["results"] = med
print(f"# c32 small (B=1 T=16 E=512, 32 clients), medians of {a.rounds} rounds of {a.dur:g} s; "
      f"load average {res['load_before']} before, {res['load_after']} after")
print("| server | CPU µs/request | efficiency | req/s | matmul GFLOP/s (same run) |")
print("|---|---|---|---|---|")
for m in med:
    print(f"| {m['server']} | {m['cpu_us']:.0f} | {m['efficiency']:.0%} | {m['rps']:.0f} | "
          f"{m['gflops']:.1f} |")
if a.perf:
    stages = list(med[0]["breakdown"]["share"].keys())
    print("\n# where the server CPU goes (perf cpu-clock samples × the median CPU per request), "
          "µs per request")
    print("| stage | " + " | ".join(m["server"] for m in med) + " |")
    print("|---|" + "---|" * len(med))
    for st in stages:
        print(f"| {st} | " + " | ".join(
            f"{m['breakdown']['share'][st] * m['cpu_us']:.0f}" for m in med) + " |")
        if st == "pass":
            for part in ("gemm kernel", "gemm packing", "other ops"):
                print(f"| — {part} | " + " | ".join(
                    f"{m['breakdown']['pass_parts'].get(part, 0) * m['cpu_us']:.0f}"
                    for m in med) + " |")
if a.json:
    json.dump(res, open(a.json, "w"), indent=1)
