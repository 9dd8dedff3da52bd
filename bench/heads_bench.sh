#!/usr/bin/env bash
# Issue 14's benchmark (docs/heads.md), one run: B=1, T=S=2048, E=1024, H=16 (random weights,
# written by Debian's python3-torch), dense per-head weights vs weights_top_k 8 vs head_stats vs
# the last query row (weights_query_begin = T-1): response bytes (one forward) and the latency
# percentiles of N sequential requests (mha-client bench -c 1, end to end through gRPC).
# Usage: bench/heads_bench.sh   (N=8, MHA_BUILD_DIR=build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${MHA_BUILD_DIR:-build}
work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/models/big"
(cd scripts/fixtures && /usr/bin/python3 - "$work/models/big" <<'PY'
import json, sys, torch
import gen_fixtures as g
torch.manual_seed(7)
g.write_safetensors(sys.argv[1] + "/model.safetensors", g.packed_state(g.make_mha(1024, 16)))
json.dump({"num_heads": 16}, open(sys.argv[1] + "/config.json", "w"))
PY
)
"$build/server/mha-server" --model-repository "$work/models" --grpc-address 127.0.0.1:0 \
  --port-file "$work/port" --metrics-address "" --http-address "" --log-level warn >"$work/server.log" 2>&1 &
pid=$!
for _ in $(seq 240); do [ -s "$work/port" ] && break; sleep 0.5; done
client=("$build/client/mha-client" --target "127.0.0.1:$(cat "$work/port")" --timeout-ms 600000)
shape=(-m big -b 1 -t 2048)
declare -A modes=(
  [dense]="-w --per-head"
  [topk8]="-w --per-head --top-k 8"
  [stats]="--head-stats"
  [last_row]="-w --per-head --query-begin 2047"
)
for mode in dense topk8 stats last_row; do
  # shellcheck disable=SC2086
  bytes=$("${client[@]}" forward "${shape[@]}" ${modes[$mode]} | sed -n 's/^response: \([0-9]*\) bytes$/\1/p')
  # shellcheck disable=SC2086
  json=$("${client[@]}" bench "${shape[@]}" ${modes[$mode]} -c 1 -n "${N:-8}" --warmup 1 --json)
  echo "$mode response_bytes=$bytes $json"
done
