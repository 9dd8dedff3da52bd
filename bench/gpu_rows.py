#!/usr/bin/env python3
"""The GPU rows of scripts/gpu-check/25-rows.sh (docs/gpu.md), each against its own mha-server
on loopback, one run each: prints what it measured and writes one JSON object (--out) whose
"rows" summary.py folds into summary.json and rows.md.

  gpu_rows.py coldstart --build B --device cuda --dtype float16 [--window 10 --clients 64]
      cold start: the first WINDOW seconds after READY (health SERVING) against the next WINDOW
      seconds, the same closed-loop load (mha-client bench -b 1 -t 16 -c CLIENTS, no warm-up
      requests), the built-in model; req/s of each window and their ratio.
  gpu_rows.py longseq --build B --device cuda --dtype bfloat16 [--shape 32768,4096,32 --passes 3]
      long sequences: one causal self-attention pass B=1, T, E, H, no weights, served (a random E x H
      model written here, the query sent in the model's dtype, the output asked in it; default
      --max-work-bytes, so a refusal by the estimate shows) against in-process: the core
      (mha-client local-bench) and PyTorch (bench/gpu_rows_torch.py sdpa: SDPA alone and the
      layer around it). Time per pass and the ratios.
  gpu_rows.py llamastep --build B --device cuda --dtype float16 [--shape 128,4096,4096,32,8,64]
      the Llama step: the Llama layer step, SESSIONS x 1 token at cache CACHE, E, H, KV, STEPS decode
      steps (a random one-layer checkpoint written here), mha-client afd --ffn none: the round
      trip p50 and where it goes (the server's pass, the rest of the round trip, the server's CPU,
      the bytes each way), beside the same step in PyTorch on the device and its memory roofline
      (bench/gpu_rows_torch.py llamastep).
The writers need numpy only; the PyTorch references run in this interpreter when it has torch.
"""
import argparse, json, os, re, signal, subprocess, sys, tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mha_bench  # noqa: E402

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
p.add_argument("row", choices=["coldstart", "longseq", "llamastep"])
p.add_argument("--build", default=os.environ.get("MHA_BUILD_DIR", "build"))
p.add_argument("--device", default="cuda")
p.add_argument("--dtype", default=None, help="coldstart/llamastep: float16; longseq: bfloat16")
p.add_argument("--shape", default=None, help="longseq: T,E,H; llamastep: N,CACHE,E,H,KV,STEPS")
p.add_argument("--passes", type=int, default=3, help="longseq: timed passes each side")
p.add_argument("--window", type=float, default=10.0, help="coldstart: seconds per window")
p.add_argument("--clients", type=int, default=64, help="coldstart: calls in flight")
p.add_argument("--out", default=None, help="write the JSON object here too")
a = p.parse_args()
client = os.path.join(a.build, "client", "mha-client")
work = tempfile.mkdtemp(prefix="gpu-rows-")
res = {"row": a.row, "device": a.device, "rows": []}
GPU = "GPU" if a.device != "cpu" else "CPU (a dry run)"  # the rows' figures name where they ran
# The C++ programs get the carried libraries (scripts/gpu-check.sh passes their path in
# MHA_BENCH_LD_LIBRARY_PATH); this interpreter and PyTorch keep the device's own.
CXX_ENV = dict(os.environ)
if "MHA_BENCH_LD_LIBRARY_PATH" in os.environ:
    CXX_ENV["LD_LIBRARY_PATH"] = os.environ["MHA_BENCH_LD_LIBRARY_PATH"]


def row(issue, figure, measured, goal):
    res["rows"].append({"issue": issue, "figure": figure, "measured": measured, "goal": goal})


def run_json(args, timeout=None, env=CXX_ENV):
    """The last stdout line of a command as JSON (None and the error kept when it is not)."""
    errors = []
    out = mha_bench.run_json(args, errors, timeout=timeout, env=env)
    if errors:
        res.setdefault("errors", []).extend(errors)
    return out


def rss_kib(pid, key):
    try:
        m = re.search(rf"^{key}:\s+(\d+) kB", open(f"/proc/{pid}/status").read(), re.M)
        return int(m.group(1)) if m else None
    except OSError:
        return None


class Server(mha_bench.Server):
    """mha-server on loopback with --device/--dtype and `flags`; ready when health says SERVING;
    stopped at the end whatever happens (gpu-check's cap ends a step with SIGTERM)."""

    def __init__(self, *flags):
        super().__init__(os.path.join(a.build, "server", "mha-server"), client,
                         ["--device", a.device, "--dtype", a.dtype, *flags], metrics=False,
                         log_level="info", env=CXX_ENV, timeout_s=240)


# ---- files (numpy only) ------------------------------------------------------------------------
def to_dtype(x, dtype):
    """float32 array -> (safetensors dtype name, raw little-endian bytes)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if dtype == "float32":
        return "F32", x.tobytes()
    if dtype == "float16":
        return "F16", x.astype("<f2").tobytes()
    u = x.view(np.uint32)  # bfloat16: the top half of float32, rounded to nearest even
    return "BF16", ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()


def write_safetensors(path, tensors, dtype):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        code, raw = to_dtype(tensors[name], dtype)
        header[name] = {"dtype": code, "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


rng = np.random.default_rng(46)


def randn(*shape, scale=1.0):
    return rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)


def torch_ref(*args):
    """bench/gpu_rows_torch.py in this interpreter (it needs torch), its JSON or None."""
    return run_json([sys.executable, os.path.join(HERE, "gpu_rows_torch.py"), *args], timeout=240,
                    env=None)


def size(b):
    return f"{b / 2**20:.1f} MiB" if b >= 2**19 else f"{b / 2**10:.0f} KiB"


def ints(text, n):
    v = [int(x) for x in text.split(",")]
    if len(v) != n:
        sys.exit(f"--shape needs {n} numbers, got {text!r}")
    return v


# ---- rows --------------------------------------------------------------------------------------
def coldstart():
    a.dtype = a.dtype or "float16"
    s = Server()
    load = ["bench", "-b", "1", "-t", "16", "-c", str(a.clients), "-d", f"{a.window:g}",
            "--warmup", "0", "--json"]
    first = run_json([client, "-a", s.target, *load])   # at once: the first window after READY
    warm = run_json([client, "-a", s.target, *load])    # the next window, same load
    s.stop()
    res["ready_s"] = s.ready_s
    res["warmup_log"] = [l for l in s.log().splitlines() if "warmup" in l][-4:]
    if first and warm:
        f, w = first["throughput_rps"], warm["throughput_rps"]
        res.update(first_rps=f, warm_rps=w, ratio=f / w if w else None,
                   first_p99_us=first["latency_us"]["p99"], warm_p99_us=warm["latency_us"]["p99"],
                   first_errors=first.get("errors"), warm_errors=warm.get("errors"))
        print(f"coldstart: ready in {s.ready_s:.1f} s; first {a.window:g} s {f:.0f} req/s "
              f"(p99 {res['first_p99_us']:.0f} us), next {a.window:g} s {w:.0f} req/s "
              f"(p99 {res['warm_p99_us']:.0f} us): {f / w:.2f}x")
        row("46", f"{GPU}: first {a.window:g} s after READY vs warm, {a.clients} clients of B=1,T=16 "
            f"{a.dtype}", f"{f / w:.2f}× ({f:.0f} / {w:.0f} req/s; READY {s.ready_s:.1f} s after "
            f"start)", "≥ 0.9×")


def longseq():
    a.dtype = a.dtype or "bfloat16"
    t, e, h = ints(a.shape or "32768,4096,32", 3)
    repo = os.path.join(work, "repo")
    os.makedirs(os.path.join(repo, "long"))
    json.dump({"num_heads": h}, open(os.path.join(repo, "long", "config.json"), "w"))
    write_safetensors(os.path.join(repo, "long", "model.safetensors"), {
        "in_proj_weight": randn(3 * e, e, scale=e ** -0.5), "in_proj_bias": np.zeros(3 * e, np.float32),
        "out_proj.weight": randn(e, e, scale=e ** -0.5), "out_proj.bias": np.zeros(e, np.float32)},
        "float16")
    query = os.path.join(work, "query.safetensors")
    write_safetensors(query, {"query": randn(1, t, e)}, a.dtype)
    qbytes = t * e * (4 if a.dtype == "float32" else 2)
    # The row's limits: the message and the sequence length raised, --max-work-bytes the default.
    s = Server("--model-repository", repo, "--default-model", "long", "--max-sequence-length",
               str(t), "--max-message-bytes", str(qbytes + (64 << 20)))
    idle = rss_kib(s.pid, "VmRSS")
    served = run_json([client, "-a", s.target, "--timeout-ms", "600000", "bench", "-i", query,
                       "--causal", "--output-dtype", a.dtype, "-c", "1", "-n", str(a.passes),
                       "--warmup", "1", "--json"], timeout=480)
    peak = rss_kib(s.pid, "VmHWM")
    s.stop()
    refused = [l for l in res.get("errors", []) if "max-work-bytes" in l]
    core = run_json([client, "local-bench", "-E", str(e), "-H", str(h), "-b", "1", "-t", str(t),
                     "--causal", "--device", a.device, "--dtype", a.dtype, "--threads", "1",
                     "-n", str(a.passes), "--json"], timeout=300)
    ref = torch_ref("sdpa", "--shape", f"{t},{e},{h}", "--dtype", a.dtype, "--device", a.device,
                    "--passes", str(a.passes))
    res.update(shape={"B": 1, "T": t, "E": e, "H": h}, dtype=a.dtype, query_bytes=qbytes,
               served=served, core_local=core, torch=ref, refused_by_estimate=bool(refused),
               server_rss_idle_kib=idle, server_rss_peak_kib=peak)
    ms = lambda r: r["latency_us"]["p50"] / 1e3 if r and r.get("ok") else None
    sv, cl = ms(served), ms(core)
    print(f"longseq T={t} E={e} H={h} {a.dtype} {a.device}: served p50 {sv} ms "
          f"(server compute {served and served.get('server_compute_mean_us')} us), core in-process "
          f"{cl} ms, torch {ref and {k: ref.get(k) for k in ('sdpa_ms', 'layer_ms', 'layer_host_ms')}}"
          f"; refused by --max-work-bytes: {bool(refused)}")
    fig = f"{GPU}, T={t}, E={e}, H={h}, {a.dtype}, causal, no weights: served / in-process SDPA"
    if sv and ref and ref.get("layer_ms"):
        row("47", fig, f"{sv / ref['layer_ms']:.1f}× ({sv:.1f} ms a pass served, p50 of "
            f"{a.passes}; PyTorch's layer {ref['layer_ms']:.1f} ms, SDPA alone {ref['sdpa_ms']:.1f} "
            f"ms, layer with the host copies {ref['layer_host_ms']:.1f} ms; core in-process "
            + (f"{cl:.1f} ms" if cl else "—") + f"; server compute "
            f"{served['server_compute_mean_us'] / 1e3:.1f} ms)", "report")
    else:
        row("47", fig, f"not measured: {'; '.join(res.get('errors', []))[-300:]}", "report")
    row("47", f"{GPU}: --max-work-bytes (default) at T={t}, E={e}, H={h}, {a.dtype}",
        f"refused: {refused[0][-300:]}" if refused else ("served" if sv else "—"), "served")


def llamastep():
    a.dtype = a.dtype or "float16"
    n, cache, e, h, kv, steps = ints(a.shape or "128,4096,4096,32,8,64", 6)
    d = e // h
    repo = os.path.join(work, "repo")
    os.makedirs(os.path.join(repo, "llama"))
    json.dump({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": e,
               "num_attention_heads": h, "num_key_value_heads": kv, "num_hidden_layers": 1,
               "max_position_embeddings": 2 * (cache + steps), "torch_dtype": a.dtype},
              open(os.path.join(repo, "llama", "config.json"), "w"))
    w = {"q": randn(h * d, e, scale=e ** -0.5), "k": randn(kv * d, e, scale=e ** -0.5),
         "v": randn(kv * d, e, scale=e ** -0.5), "o": randn(e, h * d, scale=0.3 * (h * d) ** -0.5)}
    write_safetensors(os.path.join(repo, "llama", "model.safetensors"),
                      {f"model.layers.0.self_attn.{k}_proj.weight": v for k, v in w.items()}, a.dtype)
    prefill, chunk = cache - 1, min(64, cache - 1)
    msg = n * chunk * e * 4  # the prefill's largest message: float32 rows of every session
    elt = 2 if a.device != "cpu" and a.dtype != "float32" else 4  # the CPU computes halves in fp32
    kv_bytes = n * (cache + steps + 32) * 2 * kv * d * elt  # every session's pages, a block spare
    s = Server("--model-repository", repo, "--default-model", "llama", "--max-sequence-length",
               str(cache + steps), "--max-message-bytes", str(msg + (16 << 20)),
               "--kv-cache-bytes", str(int(kv_bytes * 1.25)))
    r = run_json([client, "-a", s.target, "--timeout-ms", "600000", "afd", "-m", "llama",
                  "--sessions", str(n), "--prefill", str(prefill), "--prefill-chunk", str(chunk),
                  "--steps", str(steps), "--layers", "1", "--ffn", "none", "--server-pid",
                  str(s.pid), "--json"], timeout=480)
    s.stop()
    ref = torch_ref("llamastep", "--shape", f"{n},{cache},{e},{h},{kv}", "--dtype", a.dtype,
                    "--device", a.device)
    res.update(shape={"sessions": n, "cache": cache, "E": e, "H": h, "KV": kv, "steps": steps},
               dtype=a.dtype, afd=r, torch=ref, step_bytes_each_way=n * e * 4)
    fig = (f"{GPU}: Llama layer step E={e}, H={h}, KV={kv}, {n} sessions × 1 token, cache {cache}, "
           f"{a.dtype}: round trip p50")
    if not r or r.get("failed_steps") or not r.get("round_trip", {}).get("p50_us"):
        row("46", fig, f"not measured: {(r or {}).get('first_error') or res.get('errors')}"[:400],
            "report beside Step-3's 273 µs per layer")
        print(f"llamastep: failed: {res.get('errors')} {(r or {}).get('first_error')}")
        return
    p50, comp = r["round_trip"]["p50_us"], r["server_compute_mean_us"]
    cpu = r["server_cpu"].get("cpu_us_per_message")
    where = (f"server pass {comp:.0f} µs (mean, as the server times it), the rest of the round trip "
             f"{p50 - comp:.0f} µs (decode, scheduling, encode, {size(n * e * 4)} of float32 each "
             f"way on loopback)")
    if cpu:  # /proc's ticks are 10 ms: a short run reads 0
        where += f"; server CPU {cpu:.0f} µs a message"
    if ref and ref.get("step_us"):
        where += (f"; PyTorch's same step on the device {ref['step_us']:.0f} µs, its memory roofline "
                  f"{ref['roofline_us']:.0f} µs ({size(ref['bytes_read'])} of K/V and "
                  f"weights at {ref['copy_gbps']:.0f} GB/s)")
    print(f"llamastep: prefill {r['prefill_seconds']:.1f} s; round trip p50 {p50:.0f} us; {where}")
    row("46", fig, f"{p50:.0f} µs: {where}", "report beside Step-3's 273 µs per layer")


signal.signal(signal.SIGTERM, lambda *_: sys.exit("gpu_rows.py: terminated (the step's cap)"))
try:
    {"coldstart": coldstart, "longseq": longseq, "llamastep": llamastep}[a.row]()
except SystemExit as e:  # a server that never became ready, or the step's cap (SIGTERM)
    res.setdefault("errors", []).append(str(e.code))
    raise
finally:
    if a.out:  # first: the cap's SIGKILL follows its SIGTERM after 5 s
        json.dump(res, open(a.out, "w"), indent=1)
    mha_bench.stop_all()
    subprocess.run(["rm", "-rf", work])
for err in res.get("errors", []):
    print(f"# error: {err}")
sys.exit(1 if res.get("errors") or not res["rows"] else 0)
