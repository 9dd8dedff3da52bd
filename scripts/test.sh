#!/usr/bin/env bash
# The whole test suite from a fresh Debian 12 checkout: install what is missing, check formatting,
# build (-Werror on our code), clang-tidy (scripts/lint.sh: the torch-free units), run ctest.
#   scripts/test.sh [CTEST_ARGS...]             the suite (what .ci/run calls)
#   scripts/test.sh --sanitize [CTEST_ARGS...]  ASan + UBSan build of our code in build-asan/
#   scripts/test.sh --tsan [CTEST_ARGS...]      ThreadSanitizer build in build-tsan/ (default: the
#                                               serving and front-end unit tests, -L unit -R ...)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh test
scripts/lint.sh format
variant=()
case "${1:-}" in
  --sanitize)  # LibTorch is not instrumented.
    shift
    export MHA_BUILD_DIR=${MHA_BUILD_DIR:-build-asan}
    variant=(-DMHA_SANITIZE=ON -DMHA_BUILD_BENCHMARKS=OFF)
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
    export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/sanitize/lsan.supp}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
    ;;
  --tsan)  # LibTorch, gRPC and protobuf are not instrumented: tests/sanitize/tsan.supp.
    shift
    export MHA_BUILD_DIR=${MHA_BUILD_DIR:-build-tsan}
    variant=(-DMHA_TSAN=ON -DMHA_BUILD_BENCHMARKS=OFF)
    export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/sanitize/tsan.supp}
    [[ $# -gt 0 ]] || set -- -R '^(BatcherTest|DirectRunner|Runner|ServerCore|SessionStore|Metrics|GrpcFrontend|OipFrontend)'
    ;;
esac
scripts/build.sh "${variant[@]}"
[[ ${#variant[@]} -gt 0 ]] || scripts/lint.sh tidy
ctest --test-dir "${MHA_BUILD_DIR:-build}" --output-on-failure --timeout 600 "$@"
