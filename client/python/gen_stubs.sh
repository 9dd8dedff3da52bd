#!/bin/sh
# Generates the Python gRPC stubs of proto/mha/v1/attention.proto (with tensor.proto and
# models.proto, which it imports publicly) and of the Open Inference
# Protocol (proto/inference/*.proto):
#   client/python/gen_stubs.sh [OUT_DIR]      (default OUT_DIR: client/python)
# -> OUT_DIR/mha/v1/attention_pb2.py, attention_pb2_grpc.py, OUT_DIR/inference/*_pb2*.py
#    (git-ignored under client/python).
# Needs protoc (protobuf-compiler) and grpc_python_plugin (protobuf-compiler-grpc); the stubs are
# used with Debian's /usr/bin/python3 (python3-grpcio, python3-protobuf).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$here}
plugin=${GRPC_PYTHON_PLUGIN:-$(command -v grpc_python_plugin || echo /usr/bin/grpc_python_plugin)}
mkdir -p "$out"
protoc -I "$root/proto" \
  --python_out="$out" \
  --grpc_python_out="$out" \
  --plugin=protoc-gen-grpc_python="$plugin" \
  "$root/proto/mha/v1/tensor.proto" \
  "$root/proto/mha/v1/models.proto" \
  "$root/proto/mha/v1/attention.proto" \
  "$root/proto/inference/model_config.proto" \
  "$root/proto/inference/grpc_service.proto"
echo "wrote $out/mha/v1/{attention,tensor,models}_pb2.py, attention_pb2_grpc.py and $out/inference/*_pb2*.py"
