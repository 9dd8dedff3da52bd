#!/usr/bin/env bash
# Compiles the CUDA-only code paths (-fsyntax-only, -Wall -Wextra -Werror) against a CUDA
# runtime's headers on a machine without a GPU or a CUDA LibTorch: the units that call cudart
# directly with MHA_WITH_CUDA and MHA_CUDA_SHM defined, as a CUDA build compiles them. Not run by
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
units=(core/src/device_memory.cc)
for u in "${units[@]}"; do
  "${CXX:-g++}" "${flags[@]}" "$u"
  echo "  ok $u"
done
# The CUDA test's cudart half (its torch and server includes need a configured build: CUDA_TESTS=1
# with build/ configured compiles it too, against Debian's LibTorch headers).
if [ "${CUDA_TESTS:-0}" = 1 ]; then
  torch_inc=${TORCH_INCLUDE:-/usr/include}  # Debian's LibTorch: /usr/include (not added twice)
  extra=(); [ "$torch_inc" = /usr/include ] || extra=(-isystem "$torch_inc")
  "${CXX:-g++}" "${flags[@]}" -I. -Icore/include_torch -Ibuild/proto/gen -Itests/unit/frontends \
    "${extra[@]}" -isystem "$torch_inc/torch/csrc/api/include" \
    tests/unit/frontends/cuda_shm_test.cc
  echo "  ok tests/unit/frontends/cuda_shm_test.cc"
fi
echo "cuda-syntax-check: all compiled"
