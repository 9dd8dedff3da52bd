#!/usr/bin/env bash
# Configures and builds mha-serve into build/ (Release, Ninja). Arguments go to CMake's configure
# step, e.g. -DCMAKE_PREFIX_PATH=/opt/libtorch for an official LibTorch CUDA distribution.
# MHA_TARGETS="mha-server" builds only those targets (default: everything).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${MHA_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
targets=()
for t in ${MHA_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build_dir" -j"$(nproc)" "${targets[@]}"
