#!/bin/sh
# ctest wrapper: starts mha-server on a free port with a repository holding one fixture case per
# weights format, generates the Python stubs, runs client/python/mha_client_example.py against
# every model (it compares the server's numbers with PyTorch and exits non-zero on mismatch) and
# client/python/oip_client_example.py (the Open Inference Protocol, raw and typed inputs),
# client/python/session_example.py (a decoding session, every step checked against PyTorch) and
# client/python/afd_example.py (LayerSteps on a Llama fixture, every output checked), the
# forward, session and LayerSteps examples again with --shm (tensors through shared memory),
# stops the server by PID (SIGTERM) and checks its exit code. Then once more over mTLS (certs from
# make_test_certs.sh): the example's --tls-* flags against a server that requires client certs.
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
. "$src/tests/service/server_wait.sh"

models="format_safetensors format_torch_save format_torchscript kdim_vdim"
for m in $models decode_causal; do ln -s "$src/tests/fixtures/cases/$m" "$work/repo/$m"; done
ln -s "$src/tests/fixtures/llama/stack4_sessions" "$work/repo/llama"  # a Llama stack (docs/afd.md)
"$src/client/python/gen_stubs.sh" "$work/stubs" >/dev/null

# start_server [FLAGS...]: mha-server on a free port over $work/repo; sets pid and port.
start_server() {
  rm -f "$work/port"
  "$server_bin" --grpc-address 127.0.0.1:0 --port-file "$work/port" --metrics-address 127.0.0.1:0 \
    --http-address 127.0.0.1:0 --http-port-file "$work/http_port" --model-repository "$work/repo" --default-model format_safetensors \
    --allow-client-shm=true "$@" \
    >"$work/server.log" 2>&1 &
  pid=$!
  wait_for_port_file "$pid" "$work/port" "$work/server.log"
  port=$(cat "$work/port")
  http_port=$(cat "$work/http_port")
}
start_server

status=0
for m in $models; do
  weights=$(ls "$work/repo/$m"/model.*)
  echo "== $m ($weights)"
  PYTHONPATH="$work/stubs" "$python" "$src/client/python/mha_client_example.py" \
    --target "127.0.0.1:$port" --model "$m" --weights "$weights" || status=1
done
echo "== format_safetensors through shared memory (--shm)"
PYTHONPATH="$work/stubs" "$python" "$src/client/python/mha_client_example.py" \
  --target "127.0.0.1:$port" --model format_safetensors \
  --weights "$work/repo/format_safetensors/model.safetensors" --shm || status=1

# The Open Inference Protocol example: ModelInfer with raw and with typed (fp32_contents) inputs.
m=format_safetensors
for typed in "" --typed; do
  echo "== OIP ModelInfer: $m ${typed:-(raw)}"
  PYTHONPATH="$work/stubs" "$python" "$src/client/python/oip_client_example.py" \
    --target "127.0.0.1:$port" --model "$m" --weights "$work/repo/$m/model.safetensors" $typed \
    || status=1
done

# A decoding session: a 5-token prefill, then one token per step, each step == PyTorch's rows.
echo "== decoding session: decode_causal"
PYTHONPATH="$work/stubs" "$python" "$src/client/python/session_example.py" \
  --target "127.0.0.1:$port" --model decode_causal \
  --weights "$work/repo/decode_causal/model.safetensors" --batch 2 --seq 20 --prefill 5 || status=1
echo "== decoding session through shared memory (--shm): decode_causal"
PYTHONPATH="$work/stubs" "$python" "$src/client/python/session_example.py" \
  --target "127.0.0.1:$port" --model decode_causal \
  --weights "$work/repo/decode_causal/model.safetensors" --batch 2 --seq 20 --prefill 5 --shm \
  || status=1

# The FFN side of LayerSteps: 8 sessions of the Llama fixture, every output == PyTorch's.
echo "== LayerSteps (afd_example.py): llama"
PYTHONPATH="$work/stubs" "$python" "$src/client/python/afd_example.py" \
  --target "127.0.0.1:$port" --model llama --fixture "$src/tests/fixtures/llama/stack4_sessions" \
  || status=1
echo "== LayerSteps through shared memory (afd_example.py --shm): llama"
PYTHONPATH="$work/stubs" "$python" "$src/client/python/afd_example.py" \
  --target "127.0.0.1:$port" --model llama --fixture "$src/tests/fixtures/llama/stack4_sessions" \
  --shm || status=1

# KServe v2 REST with python3-requests: JSON, binary tensors and a sequence, each == PyTorch.
echo "== REST (python3-requests): format_safetensors"
PYTHONPATH="$work/stubs" "$python" "$src/client/python/rest_client_example.py" \
  --url "http://127.0.0.1:$http_port" --model format_safetensors \
  --weights "$work/repo/format_safetensors/model.safetensors" || status=1

stop_server() {
  kill -TERM "$pid"
  server_status=0
  wait "$pid" || server_status=$?
  pid=""
  if [ "$server_status" -ne 0 ]; then
    echo "mha-server exited with $server_status"; cat "$work/server.log"; status=1
  fi
}
stop_server

echo "== mTLS: format_safetensors"
"$src/tests/service/make_test_certs.sh" "$work/certs"
c=$work/certs
start_server --tls-cert-file "$c/server.pem" --tls-key-file "$c/server.key" \
  --tls-client-ca-file "$c/ca.pem"
m=format_safetensors
PYTHONPATH="$work/stubs" "$python" "$src/client/python/mha_client_example.py" \
  --target "127.0.0.1:$port" --model "$m" --weights "$work/repo/$m/model.safetensors" \
  --tls-ca-file "$c/ca.pem" --tls-cert-file "$c/client.pem" --tls-key-file "$c/client.key" \
  --tls-server-name localhost || status=1
# Without a client certificate the call must fail.
if PYTHONPATH="$work/stubs" MHA_TLS_CA_FILE="$c/ca.pem" "$python" \
  "$src/client/python/mha_client_example.py" --target "127.0.0.1:$port" --model "$m" \
  --weights "$work/repo/$m/model.safetensors" >"$work/no-cert.log" 2>&1; then
  echo "FAIL: the example without a client certificate was served over mTLS"; status=1
elif grep -q "StatusCode.UNAVAILABLE" "$work/no-cert.log"; then
  echo "OK: without a client certificate the mTLS server refused the example (UNAVAILABLE)"
else
  echo "FAIL: the example without a client certificate failed otherwise:"; cat "$work/no-cert.log"
  status=1
fi
# The REST port serves HTTPS with the same files, client certificate required.
echo "== mTLS on the REST port"
code=$(curl -s -o "$work/rest-tls.json" -w '%{http_code}' --cacert "$c/ca.pem" --cert "$c/client.pem" \
  --key "$c/client.key" --resolve "localhost:$http_port:127.0.0.1" \
  "https://localhost:$http_port/v2/health/ready" || true)
if [ "$code" = 200 ] && grep -q '"ready":true' "$work/rest-tls.json"; then
  echo "OK: HTTPS /v2/health/ready with a client certificate: 200"
else
  echo "FAIL: HTTPS /v2/health/ready with a client certificate: HTTP $code"; status=1
fi
if curl -s -o /dev/null --cacert "$c/ca.pem" --resolve "localhost:$http_port:127.0.0.1" \
  "https://localhost:$http_port/v2/health/ready"; then
  echo "FAIL: HTTPS without a client certificate was served"; status=1
else
  echo "OK: HTTPS without a client certificate was refused"
fi
stop_server
exit $status
