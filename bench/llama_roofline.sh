#!/usr/bin/env bash
# Issue 46 item 2's figure (docs/llama_roofline.md, the layer step against its roofline), one
# run: the Llama layer step served, 128 sessions x 1 token at cache 512, E=1024, H=16, KV=4 (a
# random float32 checkpoint from gen_fixtures.py), `mha-client afd` against `mha-server
# --blas-threads 1`; server CPU per layer message against its roofline, both rates measured in the
# same run: the projections' FLOPs at one core's matmul rate ([512, 512] sgemm, measured by
# mha-client) + every cached K/V byte read once at one core's copy bandwidth (memcpy of 256 MiB,
# mha_llama_bench BM_CopyRate).
# Usage: bench/llama_roofline.sh   (SESSIONS=128 PREFILL=511 STEPS=16 KV_HEADS=4,
#        KV_DTYPE=fp32 (the cache's dtype: int8's roofline reads its codes and scales),
#        BLAS_THREADS=1 (0 = the server's default: every core for a lone pass),
#        MHA_BUILD_DIR=build, MHA_SERVER=another mha-server binary for a before/after; extra
#        arguments go to mha-server)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${MHA_BUILD_DIR:-build}
sessions=${SESSIONS:-128} prefill=${PREFILL:-511} steps=${STEPS:-16} kv_heads=${KV_HEADS:-4}
kv_dtype=${KV_DTYPE:-fp32} blas_threads=${BLAS_THREADS:-1}
work=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT
mkdir -p "$work/repo"
/usr/bin/python3 scripts/fixtures/gen_fixtures.py --llama-checkpoint "$work/repo/llama" \
  --llama-layers 1 --llama-kv-heads "$kv_heads" >/dev/null
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
copy=$("$build/bench/mha_llama_bench" --benchmark_filter='BM_CopyRate' --benchmark_format=json |
  /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["benchmarks"][0]["bytes/s"])')
"${MHA_SERVER:-$build/server/mha-server}" --model-repository "$work/repo" --grpc-address 127.0.0.1:0 \
  --port-file "$work/port" --metrics-address "" --http-address "" --log-level warn \
  --blas-threads "$blas_threads" --kv-cache-dtype "$kv_dtype" "$@" >"$work/server.log" 2>&1 &
pid=$!
for _ in $(seq 240); do [ -s "$work/port" ] && break; sleep 0.5; done
json=$("$build/client/mha-client" --target "127.0.0.1:$(cat "$work/port")" --timeout-ms 600000 \
  afd -m llama --sessions "$sessions" --prefill "$prefill" --prefill-chunk 64 --steps "$steps" \
  --layers 1 --server-pid "$pid" --json | tail -n 1)
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
JSON=$json COPY=$copy SESSIONS=$sessions PREFILL=$prefill STEPS=$steps KV=$kv_heads DT=$kv_dtype \
  /usr/bin/python3 - <<'PY'
import json, os
r = json.loads(os.environ["JSON"]); c = r["server_cpu"]
n, p, s = int(os.environ["SESSIONS"]), int(os.environ["PREFILL"]), int(os.environ["STEPS"])
e, h, kv, d = 1024, 16, int(os.environ["KV"]), 64
proj = 2.0 * n * e * (h + 2 * kv) * d + 2.0 * n * h * d * e
keys = p + (s + 1) / 2.0  # decode step i (1-based) attends over p + i keys
# Bytes per K/V head of a token: its values, and an int8 cache's scale and zero.
head = {"fp32": 4 * d, "bf16": 2 * d, "fp16": 2 * d, "int8": d + 8}[os.environ["DT"]]
kv_bytes = n * keys * 2 * kv * head
copy, mm = float(os.environ["COPY"]), c["matmul_flops_per_s"]
roof_ms = (proj / mm + kv_bytes / copy) * 1e3
cpu_ms = c["cpu_us_per_message"] / 1e3
print(f"KV cache {os.environ['DT']}; failed steps {r['failed_steps']}; layer round trip p50 {r['round_trip']['p50_us'] / 1e3:.1f} ms")
print(f"projections {proj / 1e6:.0f} MFLOP at {mm / 1e9:.1f} GFLOP/s = {proj / mm * 1e3:.2f} ms; "
      f"K/V {kv_bytes / 1e6:.0f} MB at {copy / 1e9:.2f} GB/s = {kv_bytes / copy * 1e3:.2f} ms")
print(f"server CPU per message {cpu_ms:.1f} ms vs roofline {roof_ms:.1f} ms = {cpu_ms / roof_ms:.2f}x")
PY
