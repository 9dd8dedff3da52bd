#!/usr/bin/env bash
# REST (binary tensor extension) vs gRPC (Open Inference Protocol ModelInfer) against one
# mha-server on the built-in default model (E=512, H=8), in one run: B=1,T=16 and B=8,T=128, each
# at concurrency C (default 1), D seconds (default 5) per measurement. Not a test.
#   bench/rest_vs_grpc.sh [build dir] [C] [D]
set -euo pipefail
build=${1:-build}
c=${2:-1}
d=${3:-5}
work=$(mktemp -d)
"$build/server/mha-server" --grpc-address 127.0.0.1:0 --port-file "$work/port" \
  --http-address 127.0.0.1:0 --http-port-file "$work/http_port" --metrics-address "" \
  --log-level warn >"$work/server.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 600); do [ -s "$work/port" ] && break; sleep 0.1; done
grpc_port=$(cat "$work/port")
http_port=$(cat "$work/http_port")
for shape in "1 16" "8 128"; do
  set -- $shape
  echo "== B=$1 T=$2 concurrency $c, $d s each"
  "$build/client/mha-client" -a "127.0.0.1:$grpc_port" --protocol oip bench -b "$1" -t "$2" \
    -c "$c" -d "$d" 2>&1 | grep -E "req/s|throughput|latency|p50" || true
  "$build/bench/mha_rest_load" "$http_port" default "$1" "$2" 512 "$c" "$d"
done
