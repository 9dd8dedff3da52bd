#!/usr/bin/env bash
# Compiles the CUDA-only code paths (-fsyntax-only, -Wall -Wextra -Werror) against a CUDA
# runtime's headers on a machine without a GPU or a CUDA LibTorch: the units that call cudart
# directly with MHA_WITH_CUDA and MHA_CUDA_SHM defined, as a CUDA build compiles them, then the
# LibTorch units with CUDA code against the LibTorch headers found here. Not run by
# the test suite (it needs cuda_runtime_api.h, which the build box does not install: any CUDA
# toolkit's include folder, e.g. /usr/local/cuda-*/include from the nvidia-cuda-runtime wheel, or
# Debian non-free's nvidia-cuda-dev). CUDA_INCLUDE=/path/to/include picks one.
#   scripts/cuda-syntax-check.sh            # exit 0: every unit compiled; 2: no headers found
set -euo pipefail
cd "$(dirname "$0")/.."
inc=${CUDA_INCLUDE:-}
if [ -z "$inc" ]; then
  for d in ${CUDA_HOME:+$CUDA_HOME/include} /usr/local/cuda/include /usr/local/cuda-*/include \
           /usr/include; do
    if [ -f "$d/cuda_runtime_api.h" ]; then inc=$d; break; fi
  done
fi
if [ -z "$inc" ] || [ ! -f "$inc/cuda_runtime_api.h" ]; then
  echo "cuda-syntax-check: no cuda_runtime_api.h (set CUDA_INCLUDE)" >&2
  exit 2
fi
version=$(grep -m1 -E '#define CUDART_VERSION' "$inc/cuda_runtime_api.h" | awk '{print $3}')
echo "cuda-syntax-check: $inc (CUDART_VERSION ${version:-?}), ${CXX:-g++}"
flags=(-std=c++17 -fsyntax-only -Wall -Wextra -Wno-unused-parameter -Werror
       -DMHA_WITH_CUDA=1 -DMHA_CUDA_SHM=1 -Icore/include -isystem "$inc")
# The cudart-calling units (torch-free).
units=(core/src/device/device_memory.cc)
for u in "${units[@]}"; do
  "${CXX:-g++}" "${flags[@]}" "$u"
  echo "  ok $u"
done
# The LibTorch units with CUDA code (MHA_WITH_CUDA, MHA_CUDA_GRAPHS), against the LibTorch
# headers here: Debian's 1.13 ships ATen/cuda and c10/cuda but not the CMake-generated
# c10/cuda/impl/cuda_cmake_macros.h, which a stub in a temporary folder stands in for. The
# 2.x-only parts (TORCH_VERSION_MAJOR >= 2) are compiled on the device only.
torch_inc=${TORCH_INCLUDE:-/usr/include}  # Debian's LibTorch: /usr/include (not added twice)
if [ -f "$torch_inc/ATen/cuda/CUDAEvent.h" ]; then
  stub=$(mktemp -d); trap 'rm -rf "$stub"' EXIT
  mkdir -p "$stub/c10/cuda/impl"
  printf '#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n' > "$stub/c10/cuda/impl/cuda_cmake_macros.h"
  textra=(); [ "$torch_inc" = /usr/include ] || textra=(-isystem "$torch_inc")
  tflags=("${flags[@]}" -DMHA_CUDA_GRAPHS=1 -Icore/include_torch -Icore/src -Itests/common
          -isystem "$stub" "${textra[@]}" -isystem "$torch_inc/torch/csrc/api/include")
  for u in core/src/device/device_stream.cc core/src/device/runtime.cc core/src/device/cuda_graphs.cc \
           core/src/multihead/model.cc core/src/multihead/decode.cc core/src/llama/llama_step.cc \
           tests/unit/core/device_stream_test.cc; do
    "${CXX:-g++}" "${tflags[@]}" "$u"
    echo "  ok $u"
  done
else
  echo "  (no $torch_inc/ATen/cuda/CUDAEvent.h: the LibTorch units skipped; set TORCH_INCLUDE)"
fi
# The CUDA test's cudart half (its torch and server includes need a configured build: CUDA_TESTS=1
# with build/ configured compiles it too, against Debian's LibTorch headers).
if [ "${CUDA_TESTS:-0}" = 1 ]; then
  extra=(); [ "$torch_inc" = /usr/include ] || extra=(-isystem "$torch_inc")
  "${CXX:-g++}" "${flags[@]}" -I. -Icore/include_torch -Ibuild/proto/gen -Itests/unit/frontends \
    "${extra[@]}" -isystem "$torch_inc/torch/csrc/api/include" \
    tests/unit/frontends/cuda_shm_test.cc
  echo "  ok tests/unit/frontends/cuda_shm_test.cc"
fi
echo "cuda-syntax-check: all compiled"
