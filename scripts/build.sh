#!/usr/bin/env bash
# Configures and builds mha-serve into build/ (Release, Ninja). Arguments go to CMake's configure
# step, e.g. -DCMAKE_PREFIX_PATH=/opt/libtorch for an official LibTorch CUDA distribution.
# MHA_TARGETS="mha-server" builds only those targets (default: everything).
# With ccache installed (scripts/install-deps.sh test installs it) the compiles go through it:
# CMake takes the launcher from the environment when it configures a build folder the first time,
# and a fresh clone's build then reuses what earlier builds compiled (paths relative to the
# checkout, CCACHE_BASEDIR). MHA_CCACHE=0 turns this off; a launcher or CCACHE_* settings of the
# caller's win.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${MHA_CCACHE:-1}" != 0 ] && [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ] &&
    command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
  # The precompiled headers need pch_defines,time_macros; a fresh clone's files are all new; locale:
  # the host's LANG (C.UTF-8 here) must not split its cache from the image build's (no LANG there).
  export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime,locale}
fi
build_dir=${MHA_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
targets=()
for t in ${MHA_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build_dir" -j"$(nproc)" "${targets[@]}"
