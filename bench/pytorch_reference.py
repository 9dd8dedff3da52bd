#!/usr/bin/python3
"""PyTorch's own numbers at the benchmark shape, for the ratios of bench/run_all.py's core row.

Runs under Debian's python3-torch (/usr/bin/python3). Prints one JSON object:
matmul GFLOP/s (1024^2 fp32) and nn.MultiheadAttention forward passes/s (eval, no_grad,
batch_first, B=8, T=S=128, E=512, H=8) with need_weights False and True (per-head weights).
"""
import argparse
import json
import statistics
import time

import torch


def median_rate(fn, seconds, repeats=5):
    fn()
    rates = []
    for _ in range(repeats):
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds / repeats:
            fn()
            n += 1
        rates.append(n / (time.perf_counter() - start))
    return statistics.median(rates)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    b, t, e, h = 8, 128, 512, 8

    a, m = torch.randn(1024, 1024), torch.randn(1024, 1024)
    matmul = median_rate(lambda: torch.mm(a, m), args.seconds) * 2 * 1024 ** 3 / 1e9

    mha = torch.nn.MultiheadAttention(e, h, batch_first=True).eval()
    x = torch.randn(b, t, e)
    result = {"matmul_gflops": matmul, "threads": torch.get_num_threads()}
    with torch.no_grad():
        for need in (False, True):
            rate = median_rate(lambda: mha(x, x, x, need_weights=need, average_attn_weights=False),
                               args.seconds)
            result[f"torch_mha_passes_per_s_need_weights_{int(need)}"] = rate
    print(json.dumps(result))


if __name__ == "__main__":
    main()
