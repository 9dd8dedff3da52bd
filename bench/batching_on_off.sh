#!/usr/bin/env bash
# Served throughput with dynamic batching on vs off: 64 concurrent small requests (B=1, T uniform
# in 8..64) against the built-in model (E=512, H=8), then the padding efficiency the server's own
# metrics report. Usage: bench/batching_on_off.sh [extra mha-server flags...]
#   DUR=15 (seconds per side), MHA_BUILD_DIR=build, MODES="off on" (MODES=on: the batched side only)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${MHA_BUILD_DIR:-build}
for mode in ${MODES:-off on}; do
  work=$(mktemp -d)
  "$build/server/mha-server" --grpc-address 127.0.0.1:0 --port-file "$work/port" \
    --metrics-address 127.0.0.1:0 --metrics-port-file "$work/mport" --log-level warn \
    --http-address 127.0.0.1:0 --batching "$mode" "$@" >"$work/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 240); do [ -s "$work/port" ] && [ -s "$work/mport" ] && break; sleep 0.5; done
  echo "== batching $mode"
  "$build/client/mha-client" --target "127.0.0.1:$(cat "$work/port")" bench -b 1 \
    --seq-min 8 --seq-max 64 -c 64 -d "${DUR:-15}" --warmup 8
  curl -s "127.0.0.1:$(cat "$work/mport")/metrics" >"$work/metrics.txt"
  /usr/bin/python3 - "$work/metrics.txt" <<'PY'
import re, sys
v = {}
for line in open(sys.argv[1]):
    m = re.match(r'^(\w+)(\{[^}]*\})? (\S+)$', line.strip())
    if m:
        v[m.group(1)] = v.get(m.group(1), 0.0) + float(m.group(3))
if v.get("mha_padded_tokens_total"):
    print("metrics: real/padded tokens %.3f, mean per-pass efficiency %.3f, mean requests/pass %.2f"
          % (v["mha_real_tokens_total"] / v["mha_padded_tokens_total"],
             v["mha_padding_efficiency_sum"] / v["mha_padding_efficiency_count"],
             v["mha_batch_size_sum"] / v["mha_batch_size_count"]))
PY
  kill "$pid"; wait "$pid" || true
  rm -rf "$work"
done
