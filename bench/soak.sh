#!/usr/bin/env bash
# Bounded soak: N concurrent clients for D seconds against a fresh mha-server (built-in model,
# E=512, H=8, small random requests B=1, T uniform 8..64), sampling the server's RSS, threads and
# open fds every second; then checks that every request sent was answered and reports the RSS
# growth after warm-up. Loopback only; stops by itself.
#   CLIENTS=200 PROCS=4 DUR=300 WARMUP_S=30 bench/soak.sh [extra mha-server flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${MHA_BUILD_DIR:-build}
clients=${CLIENTS:-200} procs=${PROCS:-4} dur=${DUR:-300} warmup=${WARMUP_S:-30}
work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
"$build/server/mha-server" --grpc-address 127.0.0.1:0 --port-file "$work/port" \
  --metrics-address 127.0.0.1:0 --metrics-port-file "$work/mport" --log-level warn \
  --http-address 127.0.0.1:0 --max-queue-size "$((clients * 2))" "$@" >"$work/server.log" 2>&1 &
pid=$!
for _ in $(seq 240); do [ -s "$work/port" ] && [ -s "$work/mport" ] && break; sleep 0.5; done
[ -s "$work/port" ] || { cat "$work/server.log"; exit 1; }
target="127.0.0.1:$(cat "$work/port")"

sample() {  # seconds rss_kib threads fds
  local rss threads fds
  rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")
  threads=$(awk '/^Threads/ {print $2}' "/proc/$pid/status")
  fds=$(ls "/proc/$pid/fd" | wc -l)
  echo "$1 $rss $threads $fds"
}
(for s in $(seq 0 $((dur + 5))); do sample "$s" >>"$work/samples"; sleep 1; done) &
sampler=$!

per=$((clients / procs))
client_pids=()
for p in $(seq "$procs"); do
  "$build/client/mha-client" --target "$target" --timeout-ms 60000 bench -b 1 --seq-min 8 \
    --seq-max 64 -c "$per" -d "$dur" --warmup 0 --seed "$p" --json >"$work/client$p.json" 2>&1 &
  client_pids+=($!)
done
for c in "${client_pids[@]}"; do wait "$c" || true; done
kill "$sampler" 2>/dev/null || true
curl -s "127.0.0.1:$(cat "$work/mport")/metrics" >"$work/metrics.txt"
kill -TERM "$pid"
wait "$pid" && code=0 || code=$?

/usr/bin/python3 - "$work" "$procs" "$warmup" "$code" <<'PY'
import json, re, sys
work, procs, warmup, code = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ok = err = 0
codes = {}
for p in range(1, procs + 1):
    r = json.loads(open(f"{work}/client{p}.json").read().strip().splitlines()[-1])
    ok += r["ok"]; err += r["errors"]
    for k, v in r.get("error_codes", {}).items():
        codes[k] = codes.get(k, 0) + v
served = 0.0
for line in open(f"{work}/metrics.txt"):
    m = re.match(r'^mha_requests_total\{[^}]*\} (\S+)$', line.strip())
    if m:
        served += float(m.group(1))
rows = [list(map(int, l.split())) for l in open(f"{work}/samples") if l.strip()]
after = [r for r in rows if r[0] >= warmup]
rss0, rss1 = after[0][1], after[-1][1]
print(f"sent {ok + err} answered OK {ok} errors {err} {codes}; server counted {served:.0f}")
print(f"RSS after warm-up {rss0 / 1024:.1f} MiB -> end {rss1 / 1024:.1f} MiB "
      f"(growth {(rss1 - rss0) / 1024:+.1f} MiB, max {max(r[1] for r in rows) / 1024:.1f} MiB); "
      f"threads {min(r[2] for r in after)}..{max(r[2] for r in after)}; "
      f"fds {min(r[3] for r in after)}..{max(r[3] for r in after)}; server exit {code}")
sys.exit(0 if err == 0 and served == ok + err and code == 0 else 1)
PY
