#!/usr/bin/env bash
# One run, three measurements at B=8, T=S=128, E=512, H=8: mha_core forward (with and without
# weights), a 1024^2 fp32 matmul (both in bench/mha_core_bench), and PyTorch's own
# nn.MultiheadAttention + matmul (bench/pytorch_reference.py). Prints the ratios the issue asks for.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MHA_BUILD_DIR:-build}/bench/mha_core_bench
reps=${REPS:-5}
core_json=$(mktemp)
"$bin" --benchmark_repetitions="$reps" --benchmark_report_aggregates_only=true \
  --benchmark_min_time=1 --benchmark_format=json >"$core_json"
torch_json=$(/usr/bin/python3 bench/pytorch_reference.py)
/usr/bin/python3 - "$core_json" "$torch_json" <<'PY'
import json, sys
core = json.load(open(sys.argv[1]))
torch = json.loads(sys.argv[2])
med = {b["run_name"]: b for b in core["benchmarks"] if b.get("aggregate_name") == "median"}
f0, f1 = med["BM_Forward/need_weights:0/graphs:0/real_time"], med["BM_Forward/need_weights:1/graphs:0/real_time"]
mm = med["BM_Matmul1024/real_time"]
flops = 8 * 8 * 128 * 512**2 + 4 * 8 * 128 * 128 * 512
print(f"core forward, no weights : {f0['passes/s']:.1f} passes/s, {f0['GFLOP/s']:.1f} GFLOP/s")
print(f"core forward, weights    : {f1['passes/s']:.1f} passes/s, {f1['GFLOP/s']:.1f} GFLOP/s")
print(f"matmul 1024^2 (core run) : {mm['GFLOP/s']:.1f} GFLOP/s")
print(f"PyTorch nn.MHA no weights: {torch['torch_mha_passes_per_s_need_weights_0']:.1f} passes/s")
print(f"PyTorch nn.MHA weights   : {torch['torch_mha_passes_per_s_need_weights_1']:.1f} passes/s")
print(f"PyTorch matmul 1024^2    : {torch['matmul_gflops']:.1f} GFLOP/s")
print(f"ratio core/PyTorch (no weights): {f0['passes/s'] / torch['torch_mha_passes_per_s_need_weights_0']:.2f}x")
print(f"ratio core/PyTorch (weights)   : {f1['passes/s'] / torch['torch_mha_passes_per_s_need_weights_1']:.2f}x")
print(f"core GFLOP/s / matmul GFLOP/s  : {f0['GFLOP/s'] / mm['GFLOP/s']:.0%} (no weights), "
      f"{f1['GFLOP/s'] / mm['GFLOP/s']:.0%} (weights)")
PY
