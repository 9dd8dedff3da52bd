"""The serving-cost goal table's rows of bench/run_all.py (docs/performance.md, "One command"):
what serving costs on top of the attention it serves, each against its goal. The rows that talk
to the shipped-defaults server share one (ctx.shared()); batching starts a second one with
batching off. Each row records its figures in ctx.res (the --json keys) and its table line."""

from mha_bench import prometheus_samples

SMALL = ["-b", "1", "-t", "16"]
STAGES = ["decode", "queue", "merge", "forward", "split", "handoff", "respond"]


def add_options(p):
    p.add_argument("--long-tokens", type=int, default=512, help="long: the session's tokens")


def stages(server):
    """The server's per-stage sums (mha_request_stage_seconds_total) and their count."""
    text = server.metrics()
    out = {l["stage"]: v for l, v in prometheus_samples(text, "mha_request_stage_seconds_total")
           if l.get("model") == "default"}
    out["_n"] = sum(v for l, v in prometheus_samples(text, "mha_staged_requests_total")
                    if l.get("model") == "default")
    return out


def bench(ctx, server, *args):
    return ctx.run_json(server.mha_client("bench", *args, "--server-pid", str(server.pid),
                                          "--json"))


def bench_staged(ctx, server, name, *args):
    """bench(), plus the mean per-stage server time (µs) of the requests it sent."""
    before = stages(server)
    r = bench(ctx, server, *args)
    after = stages(server)
    n = after["_n"] - before["_n"]
    if r and n > 0:
        ctx.res[f"{name}_stages_us"] = {k: (after[k] - before.get(k, 0)) / n * 1e6
                                        for k in after if k != "_n"}
    return r


def decode(ctx, server, *args):
    return ctx.run_json(server.mha_client("decode", *args, "--server-pid", str(server.pid),
                                          "--json"))


def local(ctx, *args):
    return ctx.run_json([ctx.client, "local-bench", *args, *ctx.placement, "--threads", "1",
                         "-d", ctx.dur, "--json"])


def echo(ctx):
    e = ctx.run_json([ctx.bin("bench", "mha_echo_floor"), "-c", "1", "-n",
                      str(2000 if ctx.a.quick else 6000), "--json"])
    if e:
        ctx.res["echo_p50_us"] = e["report"]["latency_us"]["p50"]
        ctx.res["echo_cpu_us"] = e["report"]["server_cpu"]["cpu_us_per_request"]


def c32(ctx):
    res = ctx.res
    r = bench_staged(ctx, ctx.shared(), "c32", *SMALL, "-c", "32", "-d", ctx.dur)
    if r:
        c = r["server_cpu"]
        res.update(c32_rps=r["throughput_rps"], c32_cpu_us=c["cpu_us_per_request"],
                   c32_efficiency=c["efficiency"], matmul_gflops=c["matmul_flops_per_s"] / 1e9,
                   small_mflop=c["flops_per_request"] / 1e6)
    ctx.add("c32 small: server CPU per request vs its FLOPs at one core's matmul rate",
            ctx.g("c32_efficiency", "{:.0%}") + (
                f" ({res['c32_cpu_us']:.0f} µs CPU/req, {res['small_mflop']:.1f} MFLOP = "
                f"{res['small_mflop'] * 1e3 / res['matmul_gflops']:.0f} µs at the ceiling; "
                f"{res['c32_rps']:.0f} req/s)" if "c32_cpu_us" in res and res.get("matmul_gflops")
                else ""),
            "≥ 80%", ctx.met("c32_efficiency", lambda v: v >= 0.8))


def c1(ctx):
    res = ctx.res
    s, l = bench_staged(ctx, ctx.shared(), "c1", *SMALL, "-c", "1", "-d", ctx.dur), local(ctx, *SMALL)
    if s and l:
        res.update(c1_served_p50_us=s["latency_us"]["p50"], c1_local_p50_us=l["latency_us"]["p50"],
                   c1_cpu_us=s["server_cpu"]["cpu_us_per_request"])
        res["c1_added_us"] = res["c1_served_p50_us"] - res["c1_local_p50_us"]
    goal = res.get("echo_p50_us", 0) + 50
    ctx.add("small added p50, C++ client, c=1 (served − in-process)",
            ctx.g("c1_added_us", "{:+.0f} µs") + (
                f" ({res['c1_served_p50_us']:.0f} − {res['c1_local_p50_us']:.0f}; server "
                f"{res['c1_cpu_us']:.0f} µs CPU/req)" if "c1_added_us" in res else ""),
            f"≤ echo floor + 50 = {goal:.0f} µs" if "echo_p50_us" in res
            else "≤ echo floor + 50 µs",
            ctx.met("c1_added_us", lambda v: "echo_p50_us" in res and v <= goal))


def big(ctx):
    res, shape = ctx.res, ["-b", "8", "-t", "128"]
    s, l = bench(ctx, ctx.shared(), *shape, "-c", "2", "-d", ctx.dur), local(ctx, *shape)
    if s and l:
        res.update(big_served_rps=s["throughput_rps"], big_local_rps=l["throughput_rps"],
                   big_efficiency=s["server_cpu"]["efficiency"])
        res["big_ratio"] = s["throughput_rps"] / l["throughput_rps"]
    ctx.add("big served / in-process core (B=8 T=128, C++ client)",
            ctx.g("big_ratio", "{:.2f}") + (
                f" ({res['big_served_rps']:.1f} / {res['big_local_rps']:.1f} passes/s; "
                f"efficiency {res['big_efficiency']:.0%})" if "big_ratio" in res else ""),
            "≥ 0.95", ctx.met("big_ratio", lambda v: v >= 0.95))


def decode64(ctx):
    res = ctx.res
    d = decode(ctx, ctx.shared(), "--sessions", "64", "--tokens", "64")
    if d:
        c = d["server_cpu"]
        res.update(decode64_steps_per_s=d["steps_per_s"], decode64_cpu_us=c["cpu_us_per_step"],
                   decode64_efficiency=c["efficiency"])
    ctx.add("decode, 64 sessions × 64 steps: server CPU per step",
            ctx.g("decode64_cpu_us", "{:.0f} µs") + (
                f" ({res['decode64_steps_per_s']:.0f} steps/s; efficiency "
                f"{res['decode64_efficiency']:.0%})" if "decode64_cpu_us" in res else ""),
            "≤ 100 µs", ctx.met("decode64_cpu_us", lambda v: v <= 100))


def long(ctx):
    res, n = ctx.res, str(ctx.a.long_tokens)
    s = decode(ctx, ctx.shared(), "--sessions", "1", "--tokens", n)
    t = decode(ctx, ctx.shared(), "--sessions", "1", "--tokens", n, "--stateless")
    if s and t:
        res.update(long_session_s=s["seconds"], long_stateless_s=t["seconds"],
                   long_ratio=t["seconds"] / s["seconds"], long_tokens=ctx.a.long_tokens)
    ctx.add(f"{ctx.a.long_tokens}-token session vs stateless (total time)",
            ctx.g("long_ratio", "{:.1f}×") + (
                f" ({res['long_stateless_s']:.2f} s / {res['long_session_s']:.2f} s)"
                if "long_ratio" in res else ""),
            "≥ 25×", ctx.met("long_ratio", lambda v: v >= 25))


def batching(ctx):
    # Each server first serves the same load once, untimed: a new merged batch size costs a GPU
    # its first pass's kernel setup (cuDNN's plan per shape, a CUDA graph's capture), seconds in
    # all, which a short timed run would otherwise count.
    res, load = ctx.res, [*SMALL, "-c", "64"]
    on = ctx.shared()
    bench(ctx, on, *load, "-d", "1")
    r = bench(ctx, on, *load, "-d", ctx.dur)
    ctx.stop_shared()
    off = ctx.server("--batching", "off")
    bench(ctx, off, *load, "-d", "1")
    o = bench(ctx, off, *load, "-d", ctx.dur)
    off.stop()
    if r and o:
        res.update(batch_on_rps=r["throughput_rps"], batch_off_rps=o["throughput_rps"],
                   batch_on_cpu_us=r["server_cpu"]["cpu_us_per_request"],
                   batch_off_cpu_us=o["server_cpu"]["cpu_us_per_request"])
        res["batch_ratio"] = r["throughput_rps"] / o["throughput_rps"]
    ctx.add("batching on vs off, 64 clients of B=1,T=16",
            ctx.g("batch_ratio", "{:.2f}×") + (
                f" ({res['batch_on_rps']:.0f} / {res['batch_off_rps']:.0f} req/s; CPU/req "
                f"{res['batch_on_cpu_us']:.0f} / {res['batch_off_cpu_us']:.0f} µs)"
                if "batch_ratio" in res else ""),
            "≥ 1.5×", ctx.met("batch_ratio", lambda v: v >= 1.5))


ROWS = {"echo": echo, "c32": c32, "c1": c1, "big": big, "decode64": decode64, "long": long,
        "batching": batching}


def print_stages(ctx):
    """Where a small request's time goes in the server, per row that recorded its stages."""
    staged = [k for k in ("c1", "c32") if f"{k}_stages_us" in ctx.res]
    if not staged:
        return
    print("\n# where a small request's time goes in the server (mean µs per request, from "
          "mha_request_stage_seconds_total; gRPC's parse and send are outside: see the echo floor)")
    print("| stage | " + " | ".join(staged) + " |")
    print("|---|" + "---|" * len(staged))
    for st in STAGES:
        print(f"| {st} | " + " | ".join(f"{ctx.res[k + '_stages_us'].get(st, 0):.0f}"
                                        for k in staged) + " |")
    print("| server CPU per request | " + " | ".join(
        f"{ctx.res[k + '_cpu_us']:.0f}" if f"{k}_cpu_us" in ctx.res else "—" for k in staged)
        + " |")
