#!/usr/bin/env python3
"""PyTorch's nn.MultiheadAttention on a GPU under torch.profiler: the kernels one pass launches and
their device time, at a shape (B,T,E,H), dtype and need_weights; the other side of
scripts/gpu-profile.sh, which lists mha_core's kernels at the same shapes (docs/gpu.md).
With --trace OUT.json: each pass inside a "pass" record_function scope, synchronized inside it
(--mode synced) or back to back (--mode queued), saved as a Chrome trace for bench/trace_passes.py,
as bench/forward_trace.cc saves mha_core's."""
import argparse

import torch
from torch.profiler import ProfilerActivity, profile


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="32,1024,1024,16")
    p.add_argument("--dtype", default="float16")
    p.add_argument("--need-weights", type=int, default=0)
    p.add_argument("--passes", type=int, default=5)
    p.add_argument("--trace", default=None)
    p.add_argument("--mode", choices=("synced", "queued"), default="synced")
    p.add_argument("--plain", action="store_true",
                   help="no profiler: the passes alone, for ncu (which takes CUPTI for itself)")
    a = p.parse_args()
    b, t, e, h = (int(x) for x in a.shape.split(","))
    dtype = getattr(torch, a.dtype)
    mha = torch.nn.MultiheadAttention(e, h, batch_first=True).cuda().to(dtype).eval()
    x = torch.randn(b, t, e, device="cuda", dtype=dtype)
    with torch.inference_mode():
        for _ in range(3):
            mha(x, x, x, need_weights=bool(a.need_weights), average_attn_weights=False)
        torch.cuda.synchronize()
        if a.plain:
            for _ in range(a.passes):
                mha(x, x, x, need_weights=bool(a.need_weights), average_attn_weights=False)
            torch.cuda.synchronize()
            print(f"torch_gpu_profile: {a.passes} passes, no profiler")
            return
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(a.passes):
                with torch.profiler.record_function("pass"):
                    mha(x, x, x, need_weights=bool(a.need_weights), average_attn_weights=False)
                    if a.trace and a.mode == "synced":
                        torch.cuda.synchronize()
            torch.cuda.synchronize()
    if a.trace:
        prof.export_chrome_trace(a.trace)
        print(f"torch_gpu_profile: {a.passes} passes ({a.mode}) traced to {a.trace}")
        return
    print(f"### torch nn.MultiheadAttention shape {a.shape} {a.dtype} need_weights={a.need_weights}"
          f" ({a.passes} passes)")
    table = None
    for key in ("self_device_time_total", "self_cuda_time_total"):
        try:
            table = prof.key_averages().table(sort_by=key, row_limit=14, max_name_column_width=70)
            break
        except Exception as err:  # the key's name changed across 2.x releases
            last = err
    print(table if table is not None else f"no table: {last}")


if __name__ == "__main__":
    main()
