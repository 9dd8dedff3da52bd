#!/usr/bin/env bash
# Computed but undelivered (issue 26 item 4): answers the server computed (mha_requests_total
# {code="OK"}) that no client read in time (the client's ok count), under 64 clients with a short
# deadline each. Starts its own mha-server (built-in model, shipped defaults + "$@").
#   DEADLINE_MS=20 B=4 T=64 C=64 DUR=10 MHA_BUILD_DIR=build [MHA_SERVER=path/to/mha-server] \
#   bench/deadline_waste.sh [server flags]
#   DEADLINE_RANGE=1:80 bench/deadline_waste.sh   # each call's deadline uniform in 1..80 ms
set -euo pipefail
cd "$(dirname "$0")/.."
build=${MHA_BUILD_DIR:-build}
work=$(mktemp -d)
"${MHA_SERVER:-$build/server/mha-server}" --grpc-address 127.0.0.1:0 --port-file "$work/port" \
  --metrics-address 127.0.0.1:0 --metrics-port-file "$work/mport" --log-level warn "$@" \
  >"$work/server.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 600); do [ -s "$work/port" ] && [ -s "$work/mport" ] && break; sleep 0.2; done
target=127.0.0.1:$(cat "$work/port")
until "$build/client/mha-client" -a "$target" health >/dev/null 2>&1; do sleep 0.2; done
ok_count() {
  curl -s "127.0.0.1:$(cat "$work/mport")/metrics" |
    awk '/^mha_requests_total\{/ && /code="OK"/ {s += $NF} END {print s + 0}'
}
before=$(ok_count)
deadlines=()  # DEADLINE_RANGE=1:80: each call's deadline uniform in [1, 80] ms (issue 26 item 4)
if [ -n "${DEADLINE_RANGE:-}" ]; then
  deadlines=(--deadline-min-ms "${DEADLINE_RANGE%%:*}" --deadline-max-ms "${DEADLINE_RANGE##*:}")
fi
"$build/client/mha-client" -a "$target" --timeout-ms "${DEADLINE_MS:-20}" bench -b "${B:-4}" \
  -t "${T:-64}" -c "${C:-64}" -d "${DUR:-10}" --warmup 0 "${deadlines[@]}" --json \
  >"$work/bench.json" || true
after=$(ok_count)
/usr/bin/python3 - "$work/bench.json" "$before" "$after" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
computed = float(sys.argv[3]) - float(sys.argv[2])
print(f"client: {r['ok']} ok, {r['errors']} errors {r['error_codes']}, {r['throughput_rps']:.1f} ok/s")
print(f"server: {computed:.0f} answers computed OK; computed but undelivered: "
      f"{computed - r['ok']:.0f} ({(computed - r['ok']) / max(computed, 1):.1%} of computed)")
PY
