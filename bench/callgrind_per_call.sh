#!/usr/bin/env bash
# User-space instructions per call of a server (callgrind): load-independent, so small before/after
# differences show on a busy machine where CPU time cannot (issue 46). Starts SERVER under
# callgrind, warms it with 200 calls, counts N calls of B=1 T=16 E=512 at
# concurrency C (mha-client bench), prints instructions per call. The server must write its port
# to the file given after --port-file (mha_echo_floor --serve and mha-server both do).
#   bench/callgrind_per_call.sh C N build/bench/mha_echo_floor --serve --server mha
#   bench/callgrind_per_call.sh 32 2000 build/bench/mha_echo_floor --serve --server async
# (mha-server works too, but its passes run ~100x slower under valgrind: keep N small.)
set -euo pipefail
cd "$(dirname "$0")/.."
c=$1 n=$2
shift 2
client=${MHA_BUILD_DIR:-build}/client/mha-client
work=$(mktemp -d)
valgrind --tool=callgrind --callgrind-out-file="$work/cg.%p" "$@" \
  --port-file "$work/port" >"$work/server.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
until [ -s "$work/port" ]; do sleep 0.2; done
target=127.0.0.1:$(cat "$work/port")
"$client" -a "$target" bench -b 1 -t 16 -c "$c" -n 200 >/dev/null
callgrind_control -z $pid >/dev/null 2>&1  # count from here
"$client" -a "$target" bench -b 1 -t 16 -c "$c" -n "$n" >/dev/null
callgrind_control -d $pid >/dev/null 2>&1
total=$(awk '/^(summary|totals):/ {print $2; exit}' "$work"/cg.*.1)
echo "c=$c: $((total / n)) instructions per call ($total over $n calls): $*"
