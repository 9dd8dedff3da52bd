#!/bin/sh
# ctest wrapper: starts mha-server on a free port with a repository holding one fixture case per
# weights format, generates the Python stubs, runs client/python/mha_client_example.py against
# every model (it compares the server's numbers with PyTorch and exits non-zero on mismatch),
# stops the server by PID (SIGTERM) and checks its exit code.
#   run_python_example.sh MHA_SERVER SOURCE_DIR WORK_DIR
set -eu
server_bin=$1
src=$2
work=$3
python=${MHA_PYTHON:-/usr/bin/python3}
rm -rf "$work"
mkdir -p "$work/repo"
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
}
trap cleanup EXIT INT TERM

models="format_safetensors format_torch_save format_torchscript kdim_vdim"
for m in $models; do ln -s "$src/tests/fixtures/cases/$m" "$work/repo/$m"; done
"$src/client/python/gen_stubs.sh" "$work/stubs" >/dev/null

"$server_bin" --grpc-address 127.0.0.1:0 --port-file "$work/port" --metrics-address 127.0.0.1:0 \
  --model-repository "$work/repo" --default-model format_safetensors >"$work/server.log" 2>&1 &
pid=$!
i=0
while [ ! -s "$work/port" ]; do
  if ! kill -0 "$pid" 2>/dev/null; then echo "mha-server exited early:"; cat "$work/server.log"; exit 1; fi
  i=$((i + 1))
  if [ "$i" -gt 1200 ]; then echo "mha-server did not start:"; cat "$work/server.log"; exit 1; fi
  sleep 0.05
done
port=$(cat "$work/port")

status=0
for m in $models; do
  weights=$(ls "$work/repo/$m"/model.*)
  echo "== $m ($weights)"
  PYTHONPATH="$work/stubs" "$python" "$src/client/python/mha_client_example.py" \
    --target "127.0.0.1:$port" --model "$m" --weights "$weights" || status=1
done

kill -TERM "$pid"
server_status=0
wait "$pid" || server_status=$?
pid=""
if [ "$server_status" -ne 0 ]; then
  echo "mha-server exited with $server_status"; cat "$work/server.log"; status=1
fi
exit $status
