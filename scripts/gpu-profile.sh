#!/usr/bin/env bash
# Where a pass's time goes on the GPU (run by scripts/gpu-check.sh, step profile): the
# kernels mha_core launches for one pass and each one's duration (Nsight Compute, clocks left
# alone), beside PyTorch's nn.MultiheadAttention's kernels at the same shapes (torch.profiler,
# bench/torch_gpu_profile.py). The sum of a pass's kernel times against its wall time (corebench)
# says whether it is launch-bound; kernels PyTorch does not launch are our extra work.
# First, timelines (Kineto; Nsight Systems does not run there): mha_core's passes
# (bench/forward_trace.cc) and PyTorch's (bench/torch_gpu_profile.py --trace), synchronized per
# pass and back to back, summarized by bench/trace_passes.py: host work before the first kernel,
# GPU idle between kernels, the synchronization's tail, the runtime calls and CPU ops of a pass.
#   scripts/gpu-profile.sh BUILD_DIR       (prints to stdout; PROFILE_NCU=0 skips the ncu part)
set -uo pipefail
build=${1:-build-cuda}
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
tmp=$(mktemp)
traces=$(mktemp -d)
torch_ld=${MHA_ORIG_LD_LIBRARY_PATH-${LD_LIBRARY_PATH-}}
for c in "4,4096,2048,16 bfloat16" "8,128,512,8 bfloat16"; do
  read -r shape dtype <<< "$c"
  for mode in synced queued; do
    echo "### timeline $shape $dtype need_weights=0 $mode"
    if [ -x "$build/bench/mha_forward_trace" ]; then
      MHA_BENCH_DEVICE=cuda MHA_BENCH_DTYPE=$dtype MHA_BENCH_SHAPE=$shape timeout 60 \
        "$build/bench/mha_forward_trace" "$traces/core.json" "$mode" 20 0 2>&1 | tail -3 &&
        python3 bench/trace_passes.py "$traces/core.json" --label "mha_core $mode"
    else
      echo "no $build/bench/mha_forward_trace (did not build: errors.txt)"
    fi
    LD_LIBRARY_PATH=$torch_ld timeout 60 python3 bench/torch_gpu_profile.py --shape "$shape" \
      --dtype "$dtype" --need-weights 0 --passes 20 --trace "$traces/torch.json" --mode "$mode" 2>&1 |
      tail -2 && python3 bench/trace_passes.py "$traces/torch.json" --label "torch $mode"
  done
done
rm -rf "$traces"
[ "${PROFILE_NCU:-1}" = 0 ] && exit 0
# The back-to-back gap at the largest shape (bench/results/gpu/2026-11-26-h100-paired): the same six kernels,
# 2.4% longer in the core's passes. Both sides under ncu with the clocks locked at base, and each
# kernel's cycles beside its duration: equal cycles mean equal work (then the gap is the clock).
if [ -n "$ncu" ]; then
  m=gpu__time_duration.sum,sm__cycles_elapsed.max,dram__bytes_read.sum,dram__bytes_write.sum
  big=(--clock-control base --metrics "$m" --csv --page raw --launch-count 18)
  MHA_BENCH_DEVICE=cuda MHA_BENCH_DTYPE=bfloat16 MHA_BENCH_SHAPE=4,4096,2048,16 timeout 90 \
    "$ncu" "${big[@]}" --launch-skip 120 "$build"/bench/mha_core_bench \
    --benchmark_filter="^BM_ForwardQueued/need_weights:0/graphs:0$" --benchmark_min_time=0.3 > "$tmp" 2>&1
  python3 bench/ncu_kernels.py "$tmp" --label "mha_core 4,4096,2048,16 bf16 b2b, base clocks"
  LD_LIBRARY_PATH=$torch_ld timeout 90 "$ncu" "${big[@]}" --launch-skip 120 python3 \
    bench/torch_gpu_profile.py --shape 4,4096,2048,16 --dtype bfloat16 --passes 40 --plain \
    > "$tmp" 2>&1
  python3 bench/ncu_kernels.py "$tmp" --label "torch 4,4096,2048,16 bf16 b2b, base clocks"
fi
cases=("32,1024,1024,16 float16 1" "8,128,512,8 float16 0" "32,1024,1024,16 float16 0")
for c in "${cases[@]}"; do
  read -r shape dtype weights <<< "$c"
  echo "### mha_core shape $shape $dtype need_weights=$weights: kernels of passes (ncu)"
  if [ -n "$ncu" ]; then
    # Skip the weights' placement and the first passes; then 30 kernels (3+ passes).
    MHA_BENCH_DEVICE=cuda MHA_BENCH_DTYPE=$dtype MHA_BENCH_SHAPE=$shape timeout 60 "$ncu" \
      --clock-control none --launch-skip 200 --launch-count 30 --metrics gpu__time_duration.sum \
      --csv --page raw "$build"/bench/mha_core_bench \
      --benchmark_filter="^BM_Forward/need_weights:$weights/graphs:0" --benchmark_min_time=0.5 \
      > "$tmp" 2>&1
    python3 bench/ncu_kernels.py "$tmp" --label "mha_core $shape $dtype need_weights=$weights"
  else
    echo "no ncu on this machine"
  fi
  echo "### torch"
  LD_LIBRARY_PATH=${MHA_ORIG_LD_LIBRARY_PATH-${LD_LIBRARY_PATH-}} timeout 60 python3 bench/torch_gpu_profile.py --shape "$shape" --dtype "$dtype" --need-weights "$weights" 2>&1 | tail -22
done
