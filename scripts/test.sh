#!/usr/bin/env bash
# The whole test suite from a fresh Debian 12 checkout: install what is missing, build, run ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh test
# --sanitize: ASan + UBSan build of our code in build-asan/ (LibTorch is not instrumented).
sanitize=()
if [[ ${1:-} == --sanitize ]]; then
  shift
  export MHA_BUILD_DIR=${MHA_BUILD_DIR:-build-asan}
  sanitize=(-DMHA_SANITIZE=ON -DMHA_BUILD_BENCHMARKS=OFF)
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
  export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/sanitize/lsan.supp}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
fi
scripts/build.sh "${sanitize[@]}"
ctest --test-dir "${MHA_BUILD_DIR:-build}" --output-on-failure --timeout 600 "$@"
