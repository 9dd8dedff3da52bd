#!/bin/sh
# ctest wrapper of tests/service/shm_test.py (Triton's system shared-memory extension from Python,
# grpcio + multiprocessing.shared_memory): generates the stubs, starts mha-test-server on free
# ports with --allow-client-shm=true, --max-shm-bytes 1048576 and a hold gate, runs the "on"
# checks, stops it by PID (SIGTERM: exit code 0 expected, every region unmapped on the way); then
# once more without --allow-client-shm and with --admin-token-file for the "off" checks.
# v1_shm_test.py (mha.v1 tensors in shared memory) runs on the "on" server after shm_test.py.
#   run_shm_test.sh MHA_TEST_SERVER SOURCE_DIR WORK_DIR
set -eu
server_bin=$1
src=$2
work=$3
python=${MHA_PYTHON:-/usr/bin/python3}
rm -rf "$work"
mkdir -p "$work/repo" "$work/hold"
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
}
trap cleanup EXIT INT TERM
. "$src/tests/service/server_wait.sh"
ln -s "$src/tests/fixtures/cases/format_safetensors" "$work/repo/format_safetensors"
ln -s "$src/tests/fixtures/llama/stack4_sessions" "$work/repo/llama"  # v1_shm_test.py's LayerSteps
"$src/client/python/gen_stubs.sh" "$work/stubs" >/dev/null

start_server() {
  rm -f "$work/port" "$work/http_port"
  "$server_bin" --grpc-address 127.0.0.1:0 --port-file "$work/port" --metrics-address "" \
    --http-address 127.0.0.1:0 --http-port-file "$work/http_port" \
    --model-repository "$work/repo" "$@" >"$work/server.log" 2>&1 &
  pid=$!
  wait_for_port_file "$pid" "$work/port" "$work/server.log"
  target="127.0.0.1:$(cat "$work/port")"
  http="http://127.0.0.1:$(cat "$work/http_port")"
}

stop_server() {
  kill -TERM "$pid"
  code=0
  wait "$pid" || code=$?
  pid=""
  if [ "$code" -ne 0 ]; then echo "server exited with $code"; cat "$work/server.log"; status=1; fi
}

status=0
fixture="$src/tests/fixtures/cases/format_safetensors"
start_server --allow-client-shm=true --max-shm-bytes 1048576 --test-hold-dir "$work/hold"
PYTHONPATH="$work/stubs" "$python" "$src/tests/service/shm_test.py" --mode on \
  --target "$target" --http "$http" --fixture "$fixture" --hold-dir "$work/hold" \
  --server-pid "$pid" || { status=1; tail -20 "$work/server.log"; }
# mha.v1 (Forward, ForwardStream, LayerSteps) on the same server and registry.
PYTHONPATH="$work/stubs" "$python" "$src/tests/service/v1_shm_test.py" --target "$target" \
  --fixture "$fixture" --llama-fixture "$src/tests/fixtures/llama/stack4_sessions" \
  --hold-dir "$work/hold" ||
  { status=1; tail -20 "$work/server.log"; }
stop_server

echo "secret-token" >"$work/token"
start_server --admin-token-file "$work/token"
PYTHONPATH="$work/stubs" "$python" "$src/tests/service/shm_test.py" --mode off \
  --target "$target" --http "$http" --fixture "$fixture" --token-file "$work/token" || status=1
stop_server
exit $status
