#!/usr/bin/python3
"""The c32 breakdown: where a served request's server CPU goes, from a perf profile.

Reads `perf script` output of a `perf record -e cpu-clock --call-graph dwarf -p SERVER_PID` run
(bench/c32_breakdown.py records one while mha-client bench drives the server) and puts every sample
in one stage, walking its stack from the leaf outwards until a frame names one:

  decode     ParseRawRequest / DecodeCall / DecodeForwardRequest (the handler's parse + tensors)
  merge      MergeInputs                    split    SplitOutputs / ToHostOutputs
  pass       ForwardValidated (the forward pass; sub-split: GEMM kernel (OpenBLAS's or mha's panel GEMM),
             GEMM packing, other ops)
  encode     WriteForwardResponse / EncodeForwardResponse / SerializeWithBorrowedBytes
  scheduling DynamicBatcher, CompletionExecutor, ServerCore, BlasPassPolicy, the stats, request log
  transport  any frame in gRPC's libraries (libgrpc*, libgpr, libaddress_sorting, absl under them)
  blas threads  OpenBLAS's helper threads (blas_thread_server or any OpenBLAS frame with none of
             the above): spinning in sched_yield between GEMMs, or their share of a threaded GEMM
  other      nothing above on the stack (the kernel alone, unresolved frames)

Libraries the stages call (LibTorch, OpenBLAS, protobuf, libc, the kernel) are transparent: a
memcpy under MergeInputs is merge, a GEMM under ForwardValidated is the pass, a send under gRPC's
Finish is transport. With --cpu-us (the run's server CPU per request from /proc) each share is also
printed in µs per request.

    perf script -i perf.data -F comm,tid,period,ip,sym,dso | bench/cpu_breakdown.py --cpu-us 429
"""
import argparse, collections, json, re, sys

STAGES = [  # (stage, regex on the frame's symbol), checked in this order for each frame
    ("merge", r"MergeInputs|MergeHostQueries"),
    ("split", r"SplitOutputs|SplitHostOutputs|ToHostOutputs"),
    ("pass", r"ForwardValidated|MhaModel::RunForward"),
    ("encode", r"WriteForwardResponse|EncodeForwardResponse|SerializeWithBorrowedBytes"),
    ("decode", r"ParseRawRequest|DecodeCall|DecodeForwardRequest|DecodeTensor"),
    ("scheduling", r"DynamicBatcher|CompletionExecutor|ServerCore|BlasPassPolicy|StatsAggregator|"
                   r"LogOutcome|NewRequestLog|StartRequest|StampRequest|spdlog|mha::serve::Unary"),
    ("blas threads", r"blas_thread_server"),
]
TRANSPORT_DSO = re.compile(r"libgrpc|libgpr|libaddress_sorting|libupb|libre2|libcares")
ORDER = ["transport", "decode", "scheduling", "merge", "pass", "split", "encode",
         "blas threads", "other"]
PASS_PARTS = [("gemm kernel", r"sgemm_kernel|dgemm_kernel|gemm_kernel|PanelGemm|WideGemm|NarrowGemm"),
              ("gemm packing", r"sgemm_(in|on|it|ot)copy|gemm_.*copy")]
COMPILED = [(name, re.compile(rx)) for name, rx in STAGES]


def samples(lines):
    """Yields (header, [(symbol, dso)]) per sample of `perf script` output."""
    header, frames = None, []
    for line in lines:
        if not line.strip():
            if header is not None:
                yield header, frames
            header, frames = None, []
        elif not line[0].isspace():
            if header is not None:
                yield header, frames
            header, frames = line, []
        else:
            m = re.match(r"\s*[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$", line)
            if m:
                frames.append((m.group(1), m.group(2)))
    if header is not None:
        yield header, frames


def classify(frames):
    for symbol, dso in frames:  # leaf first
        for name, rx in COMPILED:
            if rx.search(symbol):
                return name
        if TRANSPORT_DSO.search(dso):
            return "transport"
    # OpenBLAS's helper threads (their entry point is often unresolved): spinning or computing
    # their share of a multi-threaded GEMM.
    if any("openblas" in dso for _, dso in frames):
        return "blas threads"
    return "other"


def pass_part(frames):
    leaf = frames[0][0] if frames else ""
    for name, rx in PASS_PARTS:
        if re.search(rx, leaf):
            return name
    return "other ops"


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu-us", type=float, default=0, help="server CPU per request (µs), same run")
    p.add_argument("--label", default="", help="a name for the column (JSON)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead")
    a = p.parse_args()
    counts, parts = collections.Counter(), collections.Counter()
    for header, frames in samples(sys.stdin):
        m = re.search(r"\s(\d+)\s+cpu-clock", header)
        weight = int(m.group(1)) if m else 1
        stage = classify(frames)
        counts[stage] += weight
        if stage == "pass":
            parts[pass_part(frames)] += weight
    total = sum(counts.values()) or 1
    share = {k: counts[k] / total for k in ORDER}
    if a.json:
        out = {"label": a.label, "cpu_us": a.cpu_us, "share": share,
               "pass_parts": {k: v / total for k, v in parts.items()}}
        print(json.dumps(out))
        return
    print(f"| stage | share of server CPU |{' µs per request |' if a.cpu_us else ''}")
    print("|---|---|" + ("---|" if a.cpu_us else ""))
    for k in ORDER:
        us = f" {share[k] * a.cpu_us:.0f} |" if a.cpu_us else ""
        print(f"| {k} | {share[k]:.1%} |{us}")
        if k == "pass":
            for name in ("gemm kernel", "gemm packing", "other ops"):
                s = parts[name] / total
                print(f"| — {name} | {s:.1%} |" + (f" {s * a.cpu_us:.0f} |" if a.cpu_us else ""))


if __name__ == "__main__":
    main()
