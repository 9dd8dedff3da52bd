#!/usr/bin/env python3
"""mha_core against PyTorch's nn.MultiheadAttention on a GPU, measured in turns under the same
conditions (scripts/gpu-check.sh step "paired"; docs/gpu.md).

bench/torch_gpu_reference.py times PyTorch in short bursts (3-20 passes) right after the machine
starts, while mha_core_bench runs each case for 0.2 s x 3 back to back, minutes later: a GPU that
boosts its clocks when cool and lowers them under sustained load favours the bursts. Here each
case (shape x dtype) runs in rounds, the order alternating (PyTorch then core, core then PyTorch),
both sides for about the same time (--seconds per measurement), and the ratio is taken within a
round: PyTorch back to back against BM_ForwardQueued, PyTorch synchronized per pass against
BM_Forward, weights off and on. The SM clock and power (nvidia-smi) are read after each
measurement. Prints one JSON object (also written to --out): per case the median ratio over the
rounds (> 1: the core is faster) and every round's numbers.
  paired_gpu_ratio.py --bench BUILD/bench/mha_core_bench [--rounds 2] [--seconds 0.3]
The bench runs with LD_LIBRARY_PATH=$MHA_BENCH_LD_LIBRARY_PATH when that is set (the carried
libraries), this script with the machine's own.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

from torch_gpu_reference import SHAPES, emit  # the same shapes, the same output


def clocks():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10)
        sm, power, temp = (x.strip() for x in out.stdout.splitlines()[0].split(","))
        return {"sm_mhz": float(sm), "watts": float(power), "celsius": float(temp)}
    except Exception as err:  # no nvidia-smi: the ratio stands without it
        return {"error": str(err)}


def timed(fn, seconds, synced):
    """ms per pass over about `seconds`: back to back with one synchronization at the end, or
    each pass followed by torch.cuda.synchronize() (wall clock, as BM_Forward)."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    iters = max(3, int(seconds / max(time.perf_counter() - t0, 1e-6)))
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
        if synced:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / iters


def torch_side(mha, x, seconds):
    res = {}
    for need in (False, True):
        def run():
            mha(x, x, x, need_weights=need, average_attn_weights=False)
        res[f"need_weights:{int(need)}"] = {"ms": timed(run, seconds, False),
                                            "ms_synced": timed(run, seconds, True)}
    if x.dtype == torch.bfloat16:  # the card's rate under the same conditions, for "% of matmul"
        a = torch.randn(8192, 8192, device=x.device, dtype=x.dtype)
        res["matmul_8192_bf16_tflops"] = 2 * 8192 ** 3 / (timed(lambda: torch.mm(a, a), seconds, False) * 1e-3) / 1e12
        del a
    res["clocks"] = clocks()
    return res


def core_side(bench, shape, dtype, seconds):
    env = dict(os.environ, MHA_BENCH_DEVICE="cuda", MHA_BENCH_DTYPE=dtype,
               MHA_BENCH_SHAPE=",".join(map(str, shape)))
    if "MHA_BENCH_LD_LIBRARY_PATH" in os.environ:
        env["LD_LIBRARY_PATH"] = os.environ["MHA_BENCH_LD_LIBRARY_PATH"]
    out = subprocess.run([bench, "--benchmark_filter=^BM_Forward(Queued)?/need_weights:[01]/graphs:0",
                          f"--benchmark_min_time={seconds}", "--benchmark_format=json"],
                         capture_output=True, text=True, env=env, timeout=120)
    res = {"clocks": clocks()}
    try:
        for b in json.loads(out.stdout)["benchmarks"]:
            res[b["run_name"].replace("/real_time", "")] = b["real_time"]  # ms (Unit kMillisecond)
    except (ValueError, KeyError) as err:
        res["error"] = f"{err}: {out.stderr[-500:]}"
    return res


def ratios(t, c):
    r = {}
    for need in (0, 1):
        key = f"need_weights:{need}"
        queued = c.get(f"BM_ForwardQueued/{key}/graphs:0")
        synced = c.get(f"BM_Forward/{key}/graphs:0")
        if queued:
            r[f"{key}/b2b"] = t[key]["ms"] / queued
        if synced:
            r[f"{key}/synced"] = t[key]["ms_synced"] / synced
    return r


def medians(rounds, field):
    """Each key of rounds[i][field], the median of its values over the rounds that have it."""
    keys = sorted({k for r in rounds for k in r[field]})
    return {k: statistics.median(r[field][k] for r in rounds if k in r[field]) for k in keys}


def flops(b, t, e):
    return 8.0 * b * t * e * e + 4.0 * b * t * t * e


def over_matmul(case, rnd):
    """The core's no-weights rate (queued, then synced) over the same round's bf16 matmul rate."""
    tf = rnd["torch"].get("matmul_8192_bf16_tflops")
    if not tf:
        return {}
    out = {}
    for bench in ("BM_ForwardQueued", "BM_Forward"):
        ms = rnd["core"].get(f"{bench}/need_weights:0/graphs:0")
        if ms:
            out[bench] = flops(case[0], case[1], case[2]) / (ms * 1e-3) / 1e12 / tf
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=0.3)
    ap.add_argument("--out")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    res = {"torch": torch.__version__, "device_name": torch.cuda.get_device_name(0), "cases": []}
    with torch.inference_mode():
        for (b, t, e, h) in SHAPES:
            for dtype in (torch.float16, torch.bfloat16):
                dname = str(dtype).replace("torch.", "")
                mha = torch.nn.MultiheadAttention(e, h, batch_first=True, device="cuda", dtype=dtype).eval()
                x = torch.randn(b, t, e, device="cuda", dtype=dtype)
                rounds = []
                for rnd in range(a.rounds):
                    sides = [("torch", lambda: torch_side(mha, x, a.seconds)),
                             ("core", lambda: core_side(a.bench, (b, t, e, h), dname, a.seconds))]
                    if rnd % 2:
                        sides.reverse()
                    got = {name: fn() for name, fn in sides}
                    got["order"] = [name for name, _ in sides]
                    got["ratio"] = ratios(got["torch"], got["core"])
                    got["core_over_matmul"] = over_matmul((b, t, e), got)
                    rounds.append(got)
                case = {"B": b, "T": t, "E": e, "H": h, "dtype": dname,
                        "ratio": medians(rounds, "ratio"),
                        "core_over_matmul": medians(rounds, "core_over_matmul"), "rounds": rounds}
                res["cases"].append(case)
                print(json.dumps({k: case[k] for k in ("B", "T", "E", "H", "dtype", "ratio", "core_over_matmul")}),
                      file=sys.stderr)
                del mha, x
                torch.cuda.empty_cache()
    emit(res, a.out)


if __name__ == "__main__":
    main()
