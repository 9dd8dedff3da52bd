#!/usr/bin/env python3
"""Where a pass's time goes, from a Chrome trace of passes each inside a "pass" user scope
(bench/forward_trace.cc for mha_core, bench/torch_gpu_profile.py --trace for PyTorch).

Synced traces (each pass ends with a device synchronization inside its scope), per pass, medians:
  wall          the scope: host work, GPU work and the synchronization
  to first      from the scope's start to the first kernel's start (host work before the GPU starts)
  kernels       how many, and their summed time; busy = their union on the GPU timeline
  GPU idle      between the first kernel's start and the last's end, not covered by a kernel
  after last    from the last kernel's end to the scope's end (the synchronization's wake-up)
  host enqueue  from the scope's start to the end of the last launch call (cudaLaunchKernel etc.)
plus the CUDA runtime calls and the top-level CPU ops of one pass, by time.
Queued traces (passes back to back, one synchronization at the end): per pass over the window
from the first scope's start to the last kernel's end, the GPU's busy fraction, and the host's
enqueue time per pass.
  trace_passes.py TRACE.json [--label NAME]
"""
import argparse
import json
import statistics
from collections import defaultdict

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def union(intervals):
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def load(path):
    with open(path) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    return [e for e in events if e.get("ph") == "X" and "dur" in e]


def med(xs):
    return statistics.median(xs) if xs else 0.0


def summarize(events, label):
    passes = sorted((e for e in events if e.get("name") == "pass" and e.get("cat") == "user_annotation"),
                    key=lambda e: e["ts"])
    if not passes:
        print(f"{label}: no 'pass' scopes in the trace")
        return
    gpu = sorted((e for e in events if e.get("cat") in GPU_CATS), key=lambda e: e["ts"])
    runtime = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    cpu_ops = [e for e in events if e.get("cat") == "cpu_op"]
    per = defaultdict(list)
    runtime_by_name = defaultdict(float)
    for p in passes:
        lo, hi = p["ts"], p["ts"] + p["dur"]
        ks = [(k["ts"], k["ts"] + k["dur"]) for k in gpu if lo <= k["ts"] <= hi]
        launches = [r for r in runtime if lo <= r["ts"] <= hi and "aunch" in r["name"]]
        per["wall"].append(p["dur"])
        per["host enqueue"].append(max((r["ts"] + r["dur"] for r in launches), default=lo) - lo)
        for r in runtime:
            if lo <= r["ts"] <= hi:
                runtime_by_name[r["name"]] += r["dur"] / len(passes)
        if not ks:
            continue
        busy = union(ks)
        per["kernels"].append(len(ks))
        per["kernel sum"].append(sum(e - s for s, e in ks))
        per["busy"].append(busy)
        per["to first"].append(ks[0][0] - lo)
        per["GPU idle"].append(max(e for _, e in ks) - ks[0][0] - busy)
        per["after last"].append(hi - max(e for _, e in ks))
    synced = sum(per["after last"]) > 0 and med(per["wall"]) >= med(per["busy"])
    first = passes[len(passes) // 2]
    print(f"## {label}: {len(passes)} passes, {len(gpu)} GPU events")
    window_end = max((k["ts"] + k["dur"] for k in gpu), default=passes[-1]["ts"] + passes[-1]["dur"])
    window = window_end - passes[0]["ts"]
    busy_all = union([(k["ts"], k["ts"] + k["dur"]) for k in gpu if k["ts"] >= passes[0]["ts"]])
    print(f"per pass over the window: {window / len(passes):.1f} us; GPU busy {busy_all / len(passes):.1f} us "
          f"({100 * busy_all / window:.1f}% of the window)")
    for key in ("wall", "to first", "kernels", "kernel sum", "busy", "GPU idle", "after last", "host enqueue"):
        if per[key]:
            print(f"  {key:<13} median {med(per[key]):9.1f}{'' if key == 'kernels' else ' us'}")
    if not synced:
        print("  (queued: the scopes hold only the host's work; the window is what counts)")
    print("  CUDA runtime calls per pass (us):")
    for name, us in sorted(runtime_by_name.items(), key=lambda kv: -kv[1])[:8]:
        print(f"    {us:9.1f}  {name}")
    lo, hi = first["ts"], first["ts"] + first["dur"]
    top = [o for o in cpu_ops if lo <= o["ts"] <= hi and not any(
        p is not o and p["ts"] <= o["ts"] and o["ts"] + o["dur"] <= p["ts"] + p["dur"] and p["dur"] > o["dur"]
        for p in cpu_ops if lo <= p["ts"] <= hi)]
    print(f"  top-level CPU ops of pass {passes.index(first)} (start offset, duration, us):")
    for o in sorted(top, key=lambda o: o["ts"])[:24]:
        print(f"    +{o['ts'] - lo:8.1f} {o['dur']:8.1f}  {o['name']}")
    print(f"  kernels of pass {passes.index(first)} (start offset, duration, us):")
    for k in gpu:
        if lo <= k["ts"] <= hi:
            print(f"    +{k['ts'] - lo:8.1f} {k['dur']:8.1f}  {k['name'][:100]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--label", default=None)
    a = ap.parse_args()
    summarize(load(a.trace), a.label or a.trace)


if __name__ == "__main__":
    main()
