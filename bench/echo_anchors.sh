#!/usr/bin/env bash
# Issue 46's anchors: mha-server's echo floor beside a bare gRPC callback-API server and a bare
# completion-queue server (gRPC's own helloworld example patterns) and mha's stack answered from a
# worker thread ("handoff"), all answering the same 32 KiB
# ForwardRequest with the same bytes and no compute, driven by mha-client bench's load generator in
# one run; server CPU per call from /proc/PID/stat and context switches per call at c=1 and c=32
# (medians of ROUNDS rounds, the servers measured in turn) and the ratio mha / the better bare
# server. docs/performance.md,
# "Anchors and the host floor".
#   bench/echo_anchors.sh                 # ROUNDS=5 N=20000 (c=32 calls per run; c=1 gets N/4)
#   ROUNDS=9 N=40000 bench/echo_anchors.sh --json
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MHA_BUILD_DIR:-build}/bench/mha_echo_floor
[ -x "$bin" ] || { echo "build $bin first: MHA_TARGETS=mha_echo_floor scripts/build.sh" >&2; exit 1; }
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$bin" --anchors --rounds "${ROUNDS:-5}" -n "${N:-20000}" "$@"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
