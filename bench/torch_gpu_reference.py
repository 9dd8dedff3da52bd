#!/usr/bin/env python3
"""PyTorch 2.x's own numbers on a GPU, for the core-vs-PyTorch ratios (run by scripts/gpu-check.sh).

nn.MultiheadAttention (eval, inference_mode, batch_first, self-attention) at gpu-check's shapes in
fp16 and bf16, need_weights False and True (per-head weights), plus SDPA alone at each shape and an
8192^3 bf16 matmul for the card's rate. Timings: CUDA events, median of --repeats runs of --iters
passes each ("ms": passes back to back on one stream), and for the module also "ms_synced": each
pass followed by torch.cuda.synchronize() (wall clock), which is what one served request costs and
how bench/mha_core_bench's BM_Forward times mha_core (its Forward returns complete outputs).
Prints one JSON object (also written to --out).
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

SHAPES = [(8, 128, 512, 8), (32, 1024, 1024, 16), (4, 4096, 2048, 16)]  # B, T=S, E, H


def time_ms(fn, iters, repeats):
    fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        runs.append(start.elapsed_time(end) / iters)
    return statistics.median(runs)


def time_synced_ms(fn, iters, repeats):
    fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(iters):
            fn()
            torch.cuda.synchronize()
        runs.append((time.perf_counter() - start) * 1e3 / iters)
    return statistics.median(runs)


def mha_flops(b, t, e):
    return 8.0 * b * t * e * e + 4.0 * b * t * t * e


def sdpa_backend(q, k, v):
    """Which SDPA backend runs: try each alone (the first that works in flash > cudnn > efficient
    > math order is the one the dispatcher prefers for these inputs)."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return "unknown"
    order = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", getattr(SDPBackend, "CUDNN_ATTENTION", None)),
             ("efficient", SDPBackend.EFFICIENT_ATTENTION), ("math", SDPBackend.MATH)]
    for name, be in order:
        if be is None:
            continue
        try:
            with sdpa_kernel([be]):
                F.scaled_dot_product_attention(q, k, v)
            return name
        except RuntimeError:
            continue
    return "none"


def emit(res, out):
    """The results as one JSON object on stdout, and in `out` when given."""
    text = json.dumps(res, indent=1)
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args()
    dev = torch.device("cuda")
    res = {"torch": torch.__version__, "cuda": torch.version.cuda,
           "device_name": torch.cuda.get_device_name(0), "cases": []}
    torch.backends.cuda.matmul.allow_tf32 = False

    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    ms = time_ms(lambda: torch.mm(a, b), 10, args.repeats)
    res["matmul_8192_bf16_tflops"] = 2 * 8192 ** 3 / (ms * 1e-3) / 1e12
    del a, b

    with torch.inference_mode():
        for (bs, t, e, h) in SHAPES:
            for dtype in (torch.float16, torch.bfloat16):
                dname = str(dtype).replace("torch.", "")
                mha = torch.nn.MultiheadAttention(e, h, batch_first=True, device=dev, dtype=dtype).eval()
                x = torch.randn(bs, t, e, device=dev, dtype=dtype)
                iters = max(3, min(args.iters, int(args.iters * 128 * 512 / (t * e)) or 3))
                for need in (False, True):
                    case = {"B": bs, "T": t, "E": e, "H": h, "dtype": dname, "need_weights": need}
                    try:
                        def run():
                            mha(x, x, x, need_weights=need, average_attn_weights=False)
                        ms = time_ms(run, iters, args.repeats)
                        case.update(ms=ms, tflops=mha_flops(bs, t, e) / (ms * 1e-3) / 1e12,
                                    ms_synced=time_synced_ms(run, iters, args.repeats))
                    except RuntimeError as err:  # e.g. out of memory for the weights at T=4096
                        case["error"] = str(err).splitlines()[0]
                    res["cases"].append(case)
                    print(json.dumps(case), file=sys.stderr)
                q = torch.randn(bs, h, t, e // h, device=dev, dtype=dtype)
                ms = time_ms(lambda: F.scaled_dot_product_attention(q, q, q), iters, args.repeats)
                res["cases"].append({"B": bs, "T": t, "E": e, "H": h, "dtype": dname, "op": "sdpa",
                                     "ms": ms, "tflops": 4.0 * bs * t * t * e / (ms * 1e-3) / 1e12,
                                     "backend": sdpa_backend(q, q, q)})
                del mha, x, q
                torch.cuda.empty_cache()
    emit(res, args.out)


if __name__ == "__main__":
    main()
