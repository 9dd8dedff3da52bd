#!/usr/bin/python3
"""Served vs in-process: alternates `mha-client bench` against a fresh mha-server with
`mha-client local-bench` (MhaModel::Forward in-process, same shape) for N rounds and prints the
per-round numbers and their medians (noise on a shared box hits both sides of a round alike).

    client/served_vs_local.py --build build big   [--rounds 12 --seconds 2] [-- server flags]
    client/served_vs_local.py --build build small          # B=1, T=16: latency added by serving
    client/served_vs_local.py big --device cuda --dtype float16   # both sides on the GPU
big = B=8, T=S=128, E=512, H=8, server --workers 1 with 2 calls in flight (throughput ratio);
small = B=1, T=16, one call at a time (p50 difference).
"""
import argparse, json, os, statistics as st, subprocess, sys, tempfile, time

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
p.add_argument("mode", choices=["big", "small"])
p.add_argument("--build", default="build")
p.add_argument("--rounds", type=int, default=12)
p.add_argument("--seconds", default="2")
p.add_argument("--device", default=None,
               help="both sides: mha-server --device and local-bench --device (default: cpu)")
p.add_argument("--dtype", default=None, help="both sides: --dtype (default: float32)")
p.add_argument("server_args", nargs="*")
a, extra = p.parse_known_args()
a.server_args += [x for x in extra if x != "--"]
placement = []  # the same --device/--dtype for the server and the in-process model
for flag, value in (("--device", a.device), ("--dtype", a.dtype)):
    if value:
        placement += [flag, value]
client = os.path.join(a.build, "client", "mha-client")
port_file = os.path.join(tempfile.mkdtemp(), "port")
server = subprocess.Popen([os.path.join(a.build, "server", "mha-server"), "--grpc-address",
                           "127.0.0.1:0", "--port-file", port_file, "--log-level", "warn",
                           "--http-address", "127.0.0.1:0"] +
                          placement + a.server_args)
shape = ["-b", "8", "-t", "128"] if a.mode == "big" else ["-b", "1", "-t", "16"]
calls = ["-c", "2"] if a.mode == "big" else ["-c", "1"]


def run(args):
    return json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)


served, local = [], []
try:
    while not (os.path.exists(port_file) and open(port_file).read().endswith("\n")):
        if server.poll() is not None:
            sys.exit("mha-server exited")
        time.sleep(0.1)
    target = "127.0.0.1:" + open(port_file).read().strip()
    for r in range(a.rounds):
        s = run([client, "-a", target, "bench", *shape, *calls, "-d", a.seconds, "--json"])
        l = run([client, "local-bench", *shape, *placement, "--threads", "1", "-d", a.seconds,
                 "--json"])
        served.append(s)
        local.append(l)
        print(f"round {r}: served {s['throughput_rps']:.2f}/s p50 {s['latency_us']['p50']:.0f} us"
              f" (server compute {s['server_compute_mean_us']:.0f} us) | in-process "
              f"{l['throughput_rps']:.2f}/s p50 {l['latency_us']['p50']:.0f} us", flush=True)
finally:
    server.terminate()
    server.wait()
med = lambda xs: st.median(xs)
ratio = med([s["throughput_rps"] / l["throughput_rps"] for s, l in zip(served, local)])
diff = med([s["latency_us"]["p50"] - l["latency_us"]["p50"] for s, l in zip(served, local)])
print(f"median: served {med([s['throughput_rps'] for s in served]):.2f}/s, in-process "
      f"{med([l['throughput_rps'] for l in local]):.2f}/s, per-round ratio {ratio:.3f}; p50 served "
      f"{med([s['latency_us']['p50'] for s in served]):.0f} us, in-process "
      f"{med([l['latency_us']['p50'] for l in local]):.0f} us, per-round difference {diff:.0f} us")
