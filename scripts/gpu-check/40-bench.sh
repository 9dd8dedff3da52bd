# Sourced by scripts/gpu-check.sh (the driver: its variables, and the functions of the files
# before this one, in file-name order): the benchmarks (steps corebench, paired, servebench, profile,
# streambench; goals is in 25-rows.sh).
# ---- 5. Benchmarks: in-process core (3 shapes x fp16/bf16, decode steps) and PyTorch's own -------
corebench() {
  for shape in 8,128,512,8 32,1024,1024,16 4,4096,2048,16; do
    for dt in float16 bfloat16; do
      echo "### shape B,T,E,H=$shape dtype=$dt"
      MHA_BENCH_DEVICE=cuda MHA_BENCH_DTYPE=$dt MHA_BENCH_SHAPE=$shape "$build"/bench/mha_core_bench \
        --benchmark_filter='^BM_(Forward|ForwardQueued|AttentionStep|Matmul1024)/' \
        --benchmark_min_time=0.2 --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
        --benchmark_out="$bdir/core_${shape//,/_}_$dt.json" --benchmark_out_format=json || echo "rc=$?"
    done
  done  # then decode steps: what the server runs (0), padded (1), a gather per session (2)
  MHA_BENCH_DEVICE=cuda MHA_BENCH_DTYPE=float16 "$build"/bench/mha_decode_bench --benchmark_filter='^BM_DecodeSteps/' --benchmark_min_time=0.2 || echo "rc=$?"
}
export -f corebench
built corebench bench/mha_core_bench && step corebench 180 "$OUT/bench.log" corebench
# The same comparison in turns (bench/paired_gpu_ratio.py: PyTorch and the core alternating, each
# case for the same time, clocks read after each side): the ratios docs/gpu.md reports.
paired() {
  env LD_LIBRARY_PATH="$MHA_ORIG_LD_LIBRARY_PATH" MHA_BENCH_LD_LIBRARY_PATH="${LD_LIBRARY_PATH-}" \
    python3 bench/paired_gpu_ratio.py --bench "$build/bench/mha_core_bench" --out "$bdir/paired.json" \
    2>&1 >/dev/null
}
export -f paired
built paired bench/mha_core_bench && step paired 240 "$OUT/bench.log" paired

# Served on the device (the serving figures, fp16 on cuda, server + client on loopback):
# served / in-process at B=8 T=128 and the p50 added at B=1 T=16 (client/served_vs_local.py, both
# sides on cuda), 64 concurrent small requests with batching on vs off (bench/run_all.py row mixed)
# and on with --max-batch-tokens 8192 instead of 2048, and decoding sessions on the GPU: one
# session alone vs 64 at once (mha-client decode).
servebench() {
  local gpu=(--device "${SERVE_DEVICE:-cuda}" --dtype "${SERVE_DTYPE:-float16}")  # cpu: a dry run
  echo "### served_vs_local big"; python3 client/served_vs_local.py --build "$build" big \
    --rounds 3 --seconds 1 "${gpu[@]}" 2>&1 | tail -3
  echo "### served_vs_local small"; python3 client/served_vs_local.py --build "$build" small \
    --rounds 3 --seconds 1 "${gpu[@]}" 2>&1 | tail -3
  echo "### batching on/off, T 8..64"; bench/run_all.sh --build "$build" --rows mixed --dur 3 \
    "${gpu[@]}" 2>&1 | grep -E '^\| batching|# error'
  # The same load with merged passes of up to 8192 tokens (the default 2048 is the CPU's sweet spot).
  echo "### batching on, max_batch_tokens=8192"; bench/run_all.sh --build "$build" --rows mixed \
    --mixed-modes on --dur 3 "${gpu[@]}" -- --max-batch-tokens 8192 2>&1 |
    grep -E '^\| batching|# error'
  local work; work=$(mktemp -d)
  "$build"/server/mha-server --grpc-address 127.0.0.1:0 --port-file "$work/port" --log-level warn \
    --http-address 127.0.0.1:0 "${gpu[@]}" > "$work/server.log" 2>&1 &
  local pid=$! i
  for i in $(seq 120); do [ -s "$work/port" ] && break; sleep 0.5; done
  for sessions in 1 64; do
    echo "### decode sessions=$sessions"
    "$build"/client/mha-client --target "127.0.0.1:$(cat "$work/port")" decode --sessions "$sessions" \
      --tokens $(( sessions == 1 ? 256 : 64 )) 2>&1 | grep -E '^decode|^throughput|^step latency|error'
  done
  kill "$pid"; wait "$pid"; tail -3 "$work/server.log"; rm -rf "$work"
}
export -f servebench
built servebench server/mha-server client/mha-client &&
  step servebench 180 "$OUT/bench.log" servebench
# Where the time goes: mha_core's kernels per pass (ncu) beside PyTorch's (torch.profiler).
built profile bench/mha_core_bench && step profile 300 "$OUT/profile.log" scripts/gpu-profile.sh "$build"
# Host query -> pinned staging -> GPU -> pinned outputs, 1 vs 2 threads (two instances, each on its
# own pool stream): summary.json's stream_overlap is passes/s at 2 threads over 1.
streambench() {
  for shape in 8,128,512,8 32,1024,1024,16; do
    echo "### BM_ForwardHost shape B,T,E,H=$shape dtype=float16"
    MHA_BENCH_DEVICE=cuda MHA_BENCH_DTYPE=float16 MHA_BENCH_SHAPE=$shape "$build"/bench/mha_core_bench \
      --benchmark_filter='^BM_ForwardHost/' --benchmark_min_time=0.2 --benchmark_repetitions=3 \
      --benchmark_report_aggregates_only=true --benchmark_out_format=json \
      --benchmark_out="$bdir/stream_${shape//,/_}_float16.json" || echo "rc=$?"
  done
}
export -f streambench
built streambench bench/mha_core_bench && step streambench 60 "$OUT/bench.log" streambench
