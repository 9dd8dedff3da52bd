"""bench/run_all.py's rows beyond the goal table (docs/performance.md, "More rows"), each run only
when named in --rows (or --rows all): each starts the servers it needs with the run's placement
and extra flags, records its figures in ctx.res and adds its table lines (goal "report" where
the figure has none). Speed is measured here, never asserted."""
import json, os, subprocess, sys, tempfile, threading, time

from mha_bench import prometheus_samples

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = "/usr/bin/python3"  # Debian's, with python3-torch for the rows that write a model


def add_options(p):
    g = p.add_argument_group("rows beyond the goal table")
    g.add_argument("--mixed-modes", default="off,on", help="mixed: the batching modes, in order")
    g.add_argument("--deadline-ms", type=int, default=20, help="deadline: each call's deadline")
    g.add_argument("--deadline-range", default=None, metavar="LO:HI",
                   help="deadline: each call's deadline uniform in LO..HI ms instead")
    g.add_argument("--anchor-rounds", type=int, default=5)
    g.add_argument("--anchor-requests", type=int, default=20000, help="anchors: c=32 calls a run")
    g.add_argument("--callgrind-servers", default="mha,async",
                   help="callgrind: echo servers (mha_echo_floor --server) or mha-server")
    g.add_argument("--callgrind-calls", type=int, default=2000)
    g.add_argument("--rest-concurrency", type=int, default=1)
    g.add_argument("--heads-requests", type=int, default=8)
    g.add_argument("--roofline", default="128,511,16,4", metavar="SESSIONS,PREFILL,STEPS,KV",
                   help="roofline: the Llama step's shape (E=1024, H=16, D=64)")
    g.add_argument("--soak", default="200,4,300,30", metavar="CLIENTS,PROCS,SECONDS,WARMUP",
                   help="soak: clients in PROCS processes for SECONDS; RSS growth after WARMUP s")
    g.add_argument("--core-reps", type=int, default=5, help="core: repetitions per benchmark")


def mixed(ctx):
    """Dynamic batching on and off under 64 clients of B=1, T uniform in 8..64, and the padding
    the batched passes carried (the server's own metrics)."""
    rps = {}
    for mode in ctx.a.mixed_modes.split(","):
        s = ctx.server("--batching", mode)
        r = ctx.run_json(s.mha_client("bench", "-b", "1", "--seq-min", "8", "--seq-max", "64",
                                      "-c", "64", "-d", ctx.dur, "--warmup", "8", "--json"))
        text = s.metrics()
        s.stop()
        if not r:
            continue
        total = {n: sum(v for _, v in prometheus_samples(text, n)) for n in (
            "mha_real_tokens_total", "mha_padded_tokens_total", "mha_padding_efficiency_sum",
            "mha_padding_efficiency_count", "mha_batch_size_sum", "mha_batch_size_count")}
        rps[mode] = r["throughput_rps"]
        lat = r["latency_us"]
        padding = ""
        if total["mha_padded_tokens_total"] and total["mha_batch_size_count"]:
            padding = (f"; real/padded tokens {total['mha_real_tokens_total'] / total['mha_padded_tokens_total']:.3f}, "
                       f"per-pass efficiency {total['mha_padding_efficiency_sum'] / total['mha_padding_efficiency_count']:.3f}, "
                       f"{total['mha_batch_size_sum'] / total['mha_batch_size_count']:.1f} requests a pass")
        ctx.res[f"mixed_{mode}"] = {"rps": r["throughput_rps"], "p50_us": lat["p50"],
                                    "p99_us": lat["p99"], **total}
        ctx.add(f"batching {mode}, 64 clients of B=1, T 8..64",
                f"{r['throughput_rps']:.0f} req/s, p50 {lat['p50'] / 1e3:.1f} ms, "
                f"p99 {lat['p99'] / 1e3:.1f} ms{padding}")
    if "on" in rps and rps.get("off"):
        ctx.res["mixed_ratio"] = rps["on"] / rps["off"]
        ctx.add("batching on / off, T 8..64", f"{ctx.res['mixed_ratio']:.2f}×")


def deadline(ctx):
    """Computed but undelivered: answers the server computed (mha_requests_total, code OK) that
    no client read in time, under 64 clients of B=4, T=64 with a short deadline each."""
    a = ctx.a
    s = ctx.server()
    before = s.metric_sum("mha_requests_total", code="OK")
    args = ["--timeout-ms", str(a.deadline_ms), "bench", "-b", "4", "-t", "64", "-c", "64",
            "-d", ctx.dur, "--warmup", "0", "--json"]
    what = f"deadline {a.deadline_ms} ms"
    if a.deadline_range:
        lo, hi = a.deadline_range.split(":")
        args += ["--deadline-min-ms", lo, "--deadline-max-ms", hi]
        what = f"deadlines uniform in {lo}..{hi} ms"
    r = ctx.run_json(s.mha_client(*args), errors_expected=True)  # late calls fail: the point
    computed = s.metric_sum("mha_requests_total", code="OK") - before
    s.stop()
    if not r:
        return
    late = computed - r["ok"]
    ctx.res["deadline"] = {"computed": computed, "delivered": r["ok"], "undelivered": late,
                           "client_errors": r["error_codes"]}
    ctx.add(f"computed but undelivered, 64 clients of B=4 T=64, {what}",
            f"{late:.0f} of {computed:.0f} computed ({late / max(computed, 1):.1%}); "
            f"{r['ok']} delivered, client errors {r['error_codes']}")


def anchors(ctx):
    """The echo floor beside bare gRPC servers (mha_echo_floor --anchors): server CPU per call
    of mha-server's stack against the better of gRPC's callback and completion-queue examples."""
    a = ctx.a
    r = subprocess.run([ctx.bin("bench", "mha_echo_floor"), "--anchors", "--rounds",
                        str(a.anchor_rounds), "-n", str(a.anchor_requests), "--json"],
                       capture_output=True, text=True)
    lines = r.stdout.strip().splitlines()
    try:
        j = json.loads(lines[-1])
    except (json.JSONDecodeError, IndexError):
        ctx.failures.append(f"mha_echo_floor --anchors: rc {r.returncode}: {r.stderr[-400:]}")
        return
    ctx.note("\n".join(lines[:-1]))
    ctx.res["anchors"] = j
    ratio = j["ratio"]
    ctx.add("echo floor: mha-server's stack / the better bare gRPC server, CPU per call",
            ", ".join(f"{k.replace('c', 'c=')} {v:.2f}×" for k, v in ratio.items()),
            "≤ 1.1×", "yes" if all(v <= 1.1 for v in ratio.values()) else "no")


def _instructions_per_call(ctx, kind, c, n):
    """User-space instructions per call of one server under callgrind (load-independent)."""
    work = tempfile.mkdtemp(prefix="mha-callgrind-")
    port_file = os.path.join(work, "port")
    if kind == "mha-server":  # its passes run ~100× slower under valgrind: keep n small
        server = [ctx.server_bin, "--grpc-address", "127.0.0.1:0", "--metrics-address", "",
                  "--http-address", "", "--log-level", "warn", *ctx.placement,
                  *ctx.a.server_args]
    else:
        server = [ctx.bin("bench", "mha_echo_floor"), "--serve", "--server", kind]
    proc = subprocess.Popen(["valgrind", "--tool=callgrind",
                             f"--callgrind-out-file={work}/cg.%p", *server,
                             "--port-file", port_file],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not (os.path.exists(port_file) and open(port_file).read().endswith("\n")):
            if proc.poll() is not None:
                ctx.failures.append(f"callgrind {kind}: the server did not start")
                return None
            time.sleep(0.2)
        target = "127.0.0.1:" + open(port_file).read().strip()
        load = [ctx.client, "-a", target, "bench", "-b", "1", "-t", "16", "-c", str(c)]
        subprocess.run([*load, "-n", "200"], capture_output=True)
        subprocess.run(["callgrind_control", "-z", str(proc.pid)], capture_output=True)
        subprocess.run([*load, "-n", str(n)], capture_output=True)
        subprocess.run(["callgrind_control", "-d", str(proc.pid)], capture_output=True)
        for line in open(f"{work}/cg.{proc.pid}.1"):
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1]) / n
        ctx.failures.append(f"callgrind {kind}: no totals in its dump")
        return None
    finally:
        proc.terminate()
        proc.wait()


def callgrind(ctx):
    """User-space instructions per call (callgrind): for before/after differences that CPU time
    on a busy machine hides."""
    for kind in ctx.a.callgrind_servers.split(","):
        for c in (1, 32):
            n = _instructions_per_call(ctx, kind, c, ctx.a.callgrind_calls)
            if n is not None:
                ctx.res[f"callgrind_{kind}_c{c}"] = n
                ctx.add(f"user-space instructions per call, {kind}, c={c}", f"{n / 1e3:.1f}k")


def rest(ctx):
    """KServe v2 REST (binary tensor extension) against gRPC's Open Inference Protocol
    ModelInfer on one server: B=1,T=16 and B=8,T=128 at --rest-concurrency."""
    c = str(ctx.a.rest_concurrency)
    s = ctx.server(http=True)
    for b, t in (("1", "16"), ("8", "128")):
        g = ctx.run_json(s.mha_client("--protocol", "oip", "bench", "-b", b, "-t", t, "-c", c,
                                      "-d", ctx.dur, "--json"))
        r = ctx.run_json([ctx.bin("bench", "mha_rest_load"), str(s.http_port), "default", b, t,
                          "512", c, ctx.dur, "--json"])
        if g and r:
            ctx.res[f"rest_b{b}"] = {"grpc_rps": g["throughput_rps"], "rest_rps": r["throughput_rps"]}
            ctx.add(f"REST binary / gRPC OIP, B={b} T={t}, c={c}: throughput",
                    f"{r['throughput_rps'] / g['throughput_rps']:.2f} ({r['throughput_rps']:.0f} / "
                    f"{g['throughput_rps']:.0f} req/s; p50 {r['latency_us']['p50'] / 1e3:.2f} / "
                    f"{g['latency_us']['p50'] / 1e3:.2f} ms)")
    s.stop()


def _write_model(path, script):
    """Runs `script` under Debian's python3-torch in scripts/fixtures (gen_fixtures importable)."""
    r = subprocess.run([PY, "-c", script, path], cwd=os.path.join(ROOT, "scripts", "fixtures"),
                       capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"writing {path} failed (python3-torch?): {r.stderr[-600:]}")


HEAD_MODES = {"dense": ["-w", "--per-head"], "topk8": ["-w", "--per-head", "--top-k", "8"],
              "stats": ["--head-stats"], "last_row": ["-w", "--per-head", "--query-begin", "2047"]}


def heads(ctx):
    """Weights that fit through the wire: B=1, T=S=2048, E=1024, H=16 (random weights), dense
    per-head weights vs top-k 8 vs head statistics vs the last query row: response bytes and the
    latency of --heads-requests sequential calls."""
    work = tempfile.mkdtemp(prefix="mha-heads-")
    os.makedirs(f"{work}/models/big")
    _write_model(f"{work}/models/big", "import json, sys, torch\nimport gen_fixtures as g\n"
                 "torch.manual_seed(7)\n"
                 "g.write_safetensors(sys.argv[1] + '/model.safetensors', "
                 "g.packed_state(g.make_mha(1024, 16)))\n"
                 "json.dump({'num_heads': 16}, open(sys.argv[1] + '/config.json', 'w'))\n")
    s = ctx.server("--model-repository", f"{work}/models")
    shape = ["--timeout-ms", "600000"]
    for mode, flags in HEAD_MODES.items():
        fwd = subprocess.run(s.mha_client(*shape, "forward", "-m", "big", "-b", "1", "-t", "2048",
                                          *flags), capture_output=True, text=True)
        size = next((int(l.split()[1]) for l in fwd.stdout.splitlines()
                     if l.startswith("response: ") and l.endswith(" bytes")), None)
        r = ctx.run_json(s.mha_client(*shape, "bench", "-m", "big", "-b", "1", "-t", "2048",
                                      *flags, "-c", "1", "-n", str(ctx.a.heads_requests),
                                      "--warmup", "1", "--json"))
        if r:
            lat = r["latency_us"]
            ctx.res[f"heads_{mode}"] = {"response_bytes": size, "p50_us": lat["p50"]}
            ctx.add(f"heads {mode}, B=1 T=S=2048 E=1024 H=16: response, latency",
                    f"{size} bytes, p50 {lat['p50'] / 1e3:.1f} ms, p99 {lat['p99'] / 1e3:.1f} ms")
    s.stop()


def roofline(ctx):
    """The Llama layer step served (sessions × 1 token, E=1024, H=16, KV heads, D=64, float32,
    mha-server --blas-threads 1): server CPU per layer message against its roofline, the
    projections' FLOPs at one core's matmul rate plus every cached K/V byte read once at one
    core's copy bandwidth, both measured in this run."""
    n, p, steps, kv = (int(x) for x in ctx.a.roofline.split(","))
    work = tempfile.mkdtemp(prefix="mha-roofline-")
    w = subprocess.run([PY, os.path.join(ROOT, "scripts", "fixtures", "gen_fixtures.py"),
                        "--llama-checkpoint", f"{work}/repo/llama", "--llama-layers", "1",
                        "--llama-kv-heads", str(kv)], capture_output=True, text=True)
    if w.returncode:
        sys.exit(f"writing the Llama checkpoint failed (python3-torch?): {w.stderr[-600:]}")
    copy = ctx.run_json([ctx.bin("bench", "mha_llama_bench"), "--benchmark_filter=BM_CopyRate",
                         "--benchmark_format=json"], whole=True)
    s = ctx.server("--model-repository", f"{work}/repo", "--blas-threads", "1")
    r = ctx.run_json(s.mha_client("--timeout-ms", "600000", "afd", "-m", "llama", "--sessions",
                                  str(n), "--prefill", str(p), "--prefill-chunk", "64", "--steps",
                                  str(steps), "--layers", "1", "--server-pid", str(s.pid), "--json"))
    s.stop()
    if not (r and copy):
        return
    e, h, d = 1024, 16, 64
    proj = 2.0 * n * e * (h + 2 * kv) * d + 2.0 * n * h * d * e
    keys = p + (steps + 1) / 2.0  # decode step i (1-based) attends over p + i keys
    kv_bytes = n * keys * 2 * kv * d * 4
    rate, mm = copy["benchmarks"][0]["bytes/s"], r["server_cpu"]["matmul_flops_per_s"]
    roof_ms = (proj / mm + kv_bytes / rate) * 1e3
    cpu_ms = r["server_cpu"]["cpu_us_per_message"] / 1e3
    ctx.res["roofline"] = {"cpu_ms": cpu_ms, "roofline_ms": roof_ms, "copy_bytes_per_s": rate,
                           "matmul_flops_per_s": mm, "round_trip_p50_us": r["round_trip"]["p50_us"],
                           "failed_steps": r["failed_steps"]}
    ctx.add(f"Llama layer step, {n} sessions × 1 token at cache {p + 1}, KV={kv}: server CPU per "
            "layer message / its roofline",
            f"{cpu_ms / roof_ms:.2f}× ({cpu_ms:.1f} vs {roof_ms:.1f} ms: {proj / 1e6:.0f} MFLOP at "
            f"{mm / 1e9:.1f} GFLOP/s + {kv_bytes / 1e6:.0f} MB at {rate / 1e9:.2f} GB/s; "
            f"round trip p50 {r['round_trip']['p50_us'] / 1e3:.1f} ms)",
            "≤ 1.5×", "yes" if cpu_ms / roof_ms <= 1.5 else "no")


def _sample(pid):
    status = open(f"/proc/{pid}/status").read()
    field = lambda k: int(next(l.split()[1] for l in status.splitlines() if l.startswith(k)))
    return field("VmRSS:"), field("Threads:"), len(os.listdir(f"/proc/{pid}/fd"))


def soak(ctx):
    """Bounded soak: CLIENTS concurrent clients of small random requests for SECONDS, the
    server's RSS, threads and open fds sampled every second; every request sent must be answered
    and the server must exit cleanly on SIGTERM (a failure otherwise)."""
    clients, procs, dur, warmup = (int(x) for x in ctx.a.soak.split(","))
    s = ctx.server("--max-queue-size", str(clients * 2))
    samples, stop = [], threading.Event()

    def sampler():
        t0 = time.monotonic()
        while not stop.wait(1.0):
            samples.append((time.monotonic() - t0, *_sample(s.pid)))
    threading.Thread(target=sampler, daemon=True).start()
    runs = [subprocess.Popen(s.mha_client("--timeout-ms", "60000", "bench", "-b", "1",
                                          "--seq-min", "8", "--seq-max", "64", "-c",
                                          str(clients // procs), "-d", str(dur), "--warmup", "0",
                                          "--seed", str(i + 1), "--json"),
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            for i in range(procs)]
    reports = [json.loads(r.communicate()[0].strip().splitlines()[-1]) for r in runs]
    stop.set()
    served = s.metric_sum("mha_requests_total")
    code = s.stop()
    ok, err = sum(r["ok"] for r in reports), sum(r["errors"] for r in reports)
    after = [x for x in samples if x[0] >= warmup] or samples
    growth = (after[-1][1] - after[0][1]) / 1024
    ctx.res["soak"] = {"sent": ok + err, "ok": ok, "errors": err, "served": served,
                       "exit": code, "rss_growth_mib": growth,
                       "threads": [min(x[2] for x in after), max(x[2] for x in after)],
                       "fds": [min(x[3] for x in after), max(x[3] for x in after)]}
    good = err == 0 and served == ok + err and code == 0
    if not good:
        ctx.failures.append(f"soak: {err} errors, server counted {served:.0f} of {ok + err}, "
                            f"exit {code}")
    ctx.add(f"soak, {clients} clients for {dur} s: answered, RSS after warm-up",
            f"{ok} of {ok + err} OK, server counted {served:.0f}, exit {code}; RSS "
            f"{after[0][1] / 1024:.1f} → {after[-1][1] / 1024:.1f} MiB ({growth:+.1f}); threads "
            f"{ctx.res['soak']['threads']}, fds {ctx.res['soak']['fds']}",
            "every request answered, exit 0", "yes" if good else "no")


def core(ctx):
    """The core's forward pass against PyTorch's nn.MultiheadAttention at B=8, T=S=128, E=512,
    H=8 (mha_core_bench and bench/pytorch_reference.py in one run), and against a 1024² matmul."""
    b = ctx.run_json([ctx.bin("bench", "mha_core_bench"),
                      f"--benchmark_repetitions={ctx.a.core_reps}",
                      "--benchmark_report_aggregates_only=true", "--benchmark_min_time=1",
                      "--benchmark_format=json"], whole=True)
    t = ctx.run_json([PY, os.path.join(HERE, "pytorch_reference.py")])
    if not (b and t):
        return
    # The medians of the repetitions (one repetition reports no aggregate: its run is the figure).
    med = {x["run_name"]: x for x in b["benchmarks"]
           if x.get("aggregate_name", "median") == "median"}
    mm = med["BM_Matmul1024/real_time"]["GFLOP/s"]
    for w in ("0", "1"):
        f = med[f"BM_Forward/need_weights:{w}/graphs:0/real_time"]
        torch = t[f"torch_mha_passes_per_s_need_weights_{w}"]
        ctx.res[f"core_weights{w}"] = {"passes_per_s": f["passes/s"], "torch": torch,
                                       "gflops": f["GFLOP/s"], "matmul_gflops": mm}
        ctx.add(f"core / PyTorch nn.MultiheadAttention, {'with' if w == '1' else 'no'} weights "
                "(B=8 T=128 E=512 H=8)",
                f"{f['passes/s'] / torch:.2f}× ({f['passes/s']:.1f} / {torch:.1f} passes/s; "
                f"{f['GFLOP/s']:.1f} GFLOP/s = {f['GFLOP/s'] / mm:.0%} of the 1024² matmul's "
                f"{mm:.1f}; PyTorch's matmul {t['matmul_gflops']:.1f})")


ROWS = {"mixed": mixed, "deadline": deadline, "anchors": anchors, "callgrind": callgrind,
        "rest": rest, "heads": heads, "roofline": roofline, "soak": soak, "core": core}
