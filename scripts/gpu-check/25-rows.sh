# Sourced by scripts/gpu-check.sh (the driver: its variables, and the functions of the files
# before this one, in file-name order): the GPU rows of the open issues, right after the serving
# binaries are built and before the tests (steps coldstart, longseq, llamastep, goals). Each starts
# its own mha-server on loopback and writes $bdir/rows_<step>.json (goals: goals.json), which
# summary.py folds into summary.json and rows.md. Both sides on SERVE_DEVICE (default cuda).
#   coldstart  the first 10 s after READY vs the next 10 s, 64 clients of B=1,T=16 fp16
#              (bench/gpu_rows.py coldstart)                                        ~30 s, cap 60
#   longseq    T=32768, B=1, E=4096, H=32, bf16, causal, no weights: served vs PyTorch's
#              SDPA and the core in-process; whether the default --max-work-bytes refuses it
#              (bench/gpu_rows.py longseq)                                          ~35 s, cap 120
#   llamastep  the Llama layer step E=4096, H=32, KV=8, 128 sessions x 1 token, cache
#              4096, fp16: round trip p50 and where it goes (bench/gpu_rows.py llamastep; the
#              prefill of 128 x 4095 tokens, 8 GiB of float32 each way, is most of it: a
#              128 MiB message took 0.43 s one way on this 2-core box, loaded) ~60 s, cap 180
#   goals      the goal table (bench/run_all.sh --quick, rows GOALS_ROWS), two of its rows read
#              as GPU figures: 64 clients of B=1,T=16 warm req/s (batching on) and decode 64 sessions'
#              server CPU per step                                                  ~45 s, cap 150
#   goalsblock goals' rows decode64 and batching again with mha-server --device-wait
#              block (GOALS_BLOCK_ROWS), into goals_block.json                      ~35 s, cap 100
#   llamaprofile the Llama step's Kineto timeline in process (bench/llama_trace.cc,
#              LLAMA_SHAPE), summarized by bench/trace_passes.py                    ~40 s, cap 90
# A dry run on a CPU box with tiny shapes (each step's whole path, in seconds):
#   GPU_CHECK_STEPS="coldstart longseq llamastep goals" GPU_ROWS_TINY=1 SERVE_DEVICE=cpu \
#     SERVE_DTYPE=float32 BUILD=build scripts/gpu-check.sh
# Shapes: LONGSEQ_SHAPE (T,E,H), LLAMA_SHAPE (N,CACHE,E,H,KV,STEPS), COLDSTART_WINDOW (s).
if [ -n "${GPU_ROWS_TINY:-}" ]; then
  : "${LONGSEQ_SHAPE:=512,64,4}" "${LLAMA_SHAPE:=8,64,64,4,2,16}" "${COLDSTART_WINDOW:=2}"
  export LONGSEQ_SHAPE LLAMA_SHAPE COLDSTART_WINDOW  # the steps run in a child bash
fi
# numpy's interpreter (the device's python3 holds torch and numpy; here Debian's /usr/bin/python3).
rows_py=$(for p in python3 /usr/bin/python3; do
  LD_LIBRARY_PATH="$orig_ld" "$p" -c 'import numpy' 2>/dev/null && { command -v "$p"; break; }; done)
export rows_py
rows() {  # rows NAME ARGS...: bench/gpu_rows.py NAME on SERVE_DEVICE, its JSON into $bdir
  local name=$1; shift
  [ -n "$rows_py" ] || { echo "$name: no python3 with numpy"; return 2; }
  env LD_LIBRARY_PATH="$MHA_ORIG_LD_LIBRARY_PATH" MHA_BENCH_LD_LIBRARY_PATH="${LD_LIBRARY_PATH-}" \
    "$rows_py" bench/gpu_rows.py "$name" --build "$build" --device "${SERVE_DEVICE:-cuda}" \
    --out "$bdir/rows_$name.json" "$@"
}
coldstart() {
  local dt=(); [ "${SERVE_DEVICE:-cuda}" = cpu ] && dt=(--dtype "${SERVE_DTYPE:-float32}")
  rows coldstart "${dt[@]}" --window "${COLDSTART_WINDOW:-10}"
}
longseq() {  # bf16 on the device (the row's), SERVE_DTYPE on a CPU dry run
  local dt=(); [ "${SERVE_DEVICE:-cuda}" = cpu ] && dt=(--dtype "${SERVE_DTYPE:-float32}")
  rows longseq "${dt[@]}" --shape "${LONGSEQ_SHAPE:-32768,4096,32}" --passes 3
}
llamastep() {
  local dt=(); [ "${SERVE_DEVICE:-cuda}" = cpu ] && dt=(--dtype "${SERVE_DTYPE:-float32}")
  rows llamastep "${dt[@]}" --shape "${LLAMA_SHAPE:-128,4096,4096,32,8,64}"
}
# The goal table (bench/run_all.py, docs/performance.md), both sides on SERVE_DEVICE; its
# JSON into $bdir/goals.json for summary.py's GPU rows. GOALS_ROWS=all: every row (echo, c1, big and
# long too: ~30 s more).
goals() {
  local r=${GOALS_ROWS:-c32,decode64,batching}; [ "$r" = all ] && r=echo,c32,c1,big,decode64,long,batching
  bench/run_all.sh --build "$build" --quick --device "${SERVE_DEVICE:-cuda}" \
    --dtype "${SERVE_DTYPE:-float16}" --rows "$r" --json "$bdir/goals.json"
}
# The same rows with every wait on the GPU sleeping instead of spinning (mha-server --device-wait
# block, mha/runtime.h): server CPU per request and per decode step beside goals' spin, req/s.
goalsblock() {
  bench/run_all.sh --build "$build" --quick --device "${SERVE_DEVICE:-cuda}" \
    --dtype "${SERVE_DTYPE:-float16}" --rows "${GOALS_BLOCK_ROWS:-decode64,batching}" \
    --json "$bdir/goals_block.json" -- --device-wait block
}
# Where the Llama step's time goes on the device: mha_llama_trace's Kineto timeline of
# the row's step (LLAMA_SHAPE's first five), then bench/trace_passes.py: the runtime calls, CPU
# ops and kernels of one step by time.
llamaprofile() {
  local shape=${LLAMA_SHAPE:-128,4096,4096,32,8,64} dt=float16
  [ "${SERVE_DEVICE:-cuda}" = cpu ] && dt=${SERVE_DTYPE:-float32}
  LLAMA_SHAPE=$(cut -d, -f1-5 <<< "$shape") MHA_BENCH_DEVICE=${SERVE_DEVICE:-cuda} \
    MHA_BENCH_DTYPE=$dt "$build/bench/mha_llama_trace" "$bdir/llama_trace.json" 10 0 &&
    python3 bench/trace_passes.py "$bdir/llama_trace.json" --label "mha_core Llama step $shape $dt"
}
export -f rows coldstart longseq llamastep goals goalsblock llamaprofile
built coldstart server/mha-server client/mha-client && step coldstart 60 "$OUT/bench.log" coldstart
built longseq server/mha-server client/mha-client && step longseq 120 "$OUT/bench.log" longseq
built llamastep server/mha-server client/mha-client && step llamastep 180 "$OUT/bench.log" llamastep
built goals server/mha-server client/mha-client bench/mha_echo_floor &&
  step goals 150 "$OUT/bench.log" goals
built goalsblock server/mha-server client/mha-client &&
  step goalsblock 100 "$OUT/bench.log" goalsblock
built llamaprofile bench/mha_llama_trace && step llamaprofile 90 "$OUT/bench.log" llamaprofile
