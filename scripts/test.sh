#!/usr/bin/env bash
# The whole test suite from a fresh Debian 12 checkout: install what is missing, check formatting,
# build (-Werror on our code) with clang-tidy beside it (scripts/lint.sh: the torch-free units),
# run ctest.
#   scripts/test.sh [CTEST_ARGS...]             the suite (what .ci/run calls)
#   scripts/test.sh --sanitize [CTEST_ARGS...]  ASan + UBSan build of our code in build-asan/
#   scripts/test.sh --tsan [CTEST_ARGS...]      ThreadSanitizer build in build-tsan/ (default: every
#                                               suite of the serving, AFD, front-end and wire
#                                               unit binaries and the core's decode and KV
#                                               suites; docs/testing.md)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh test
# The whole suite (no ctest arguments): the container tier's setup (its Docker engine, base images
# from the Debian mirror) starts now, beside the build, at the lowest priority; container.setup
# waits for it (tests/container/tier.sh). Its log: $TMPDIR/mha-container-setup.log.
container_early=
if [[ $# -eq 0 && ${MHA_SKIP_CONTAINER:-0} != 1 ]]; then
  setsid nice -n 19 tests/container/tier.sh setup >"${TMPDIR:-/tmp}/mha-container-setup.log" 2>&1 &
  container_early=1
fi
scripts/lint.sh format
variant=()
tsan_default=
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
    # A ctest test per suite: the default run below picks suites by name.
    variant=(-DMHA_TSAN=ON -DMHA_BUILD_BENCHMARKS=OFF -DMHA_TEST_SUITES_PER_PROCESS=1)
    export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/sanitize/tsan.supp}
    if [[ $# -eq 0 ]]; then  # only the binaries the default run needs
      tsan_default=1
      export MHA_TARGETS=${MHA_TARGETS:-mha_serving_tests mha_afd_tests mha_frontend_tests mha_wire_tests mha_core_tests}
    fi
    ;;
esac
tidy_pid=
if [[ ${#variant[@]} -eq 0 ]]; then
  # clang-tidy (scripts/lint.sh tidy) overlaps the build and the tests, at the lowest priority: it
  # needs only compile_commands.json and the generated protos its units include, and takes the CPU
  # they leave idle (links, tests that wait on servers, those that run alone). Its report and
  # verdict come after the tests.
  MHA_TARGETS="mha_proto mha_oip_proto mha_health_proto" scripts/build.sh
  tidy_log=$(mktemp)
  setsid nice -n 19 scripts/lint.sh tidy >"$tidy_log" 2>&1 &  # its own process group
  tidy_pid=$!
  # A failed build, and at the end whatever is left.
  trap 'kill -- "-$tidy_pid" 2>/dev/null || true; rm -f "$tidy_log"' EXIT
fi
if [[ -n $container_early ]]; then
  # The container tier's legacy image build needs of the host build only mha-server's and
  # mha-client's objects (in the compiler cache its build stage is seeded from): it starts once
  # they are built, beside the rest of the build and the tests, and container.build_legacy waits
  # for it (tests/container/tier.sh, MHA_CONTAINER_EARLY). Its apt installs wait on the mirror and
  # the disk about half their time, which the compiles fill.
  MHA_TARGETS="mha-server mha-client" scripts/build.sh
  MHA_CONTAINER_EARLY=$(mktemp -d "${TMPDIR:-/tmp}/mha-container-early.XXXXXX")
  export MHA_CONTAINER_EARLY
  setsid tests/container/tier.sh build legacy --early >"$MHA_CONTAINER_EARLY/launch.log" 2>&1 &
  early_pid=$!
  trap 'kill -- "-$early_pid" 2>/dev/null || true; [[ -z $tidy_pid ]] ||
    kill -- "-$tidy_pid" 2>/dev/null || true; rm -rf "${tidy_log:-}" "$MHA_CONTAINER_EARLY"' EXIT
fi
scripts/build.sh "${variant[@]}"
if [[ -n $tsan_default ]]; then
  # Every suite of the serving, AFD (the Llama layer-step scheduler, session store and ServerCore
  # routes), front-end and wire binaries, listed from the binaries as ctest registers them
  # (tests/cmake/gtest_suites_list.cmake), so a new or renamed suite cannot fall out of the run;
  # and the core's decode (gather and in-place paged), KV-pool and KV-cache suites.
  # --no-tests=error: an empty match fails.
  suites=$(for t in mha_serving_tests mha_afd_tests mha_frontend_tests mha_wire_tests; do
    "$MHA_BUILD_DIR/tests/unit/$t" --gtest_list_tests
  done | sed -nE 's#^([A-Za-z_][A-Za-z0-9_/]*)\.( .*)?$#\1#p' | paste -sd'|')
  decode='Fixtures/(Paged)?(Self|Cross)DecodeTest|DecodeBatch|DecodeValidation|KvPool|PagedDecodeBatch|KvCachePages|KvCacheTest'
  set -- -R "^($suites|$decode)\$" \
    --no-tests=error
fi
# ctest runs nproc + 1 tests at a time (MHA_TEST_JOBS): the container tier's image builds, beside
# the others, wait on the Debian mirror and the disk about half their time. Every test has its own
# ports (127.0.0.1:0 and a port file), temp folders and servers; those that bound a time run alone
# (RUN_SERIAL), as do the container tier's checks; those that pick a free port before binding it,
# one at a time (docs/testing.md).
ctest_status=0
ctest --test-dir "${MHA_BUILD_DIR:-build}" --output-on-failure --timeout 600 \
  -j"${MHA_TEST_JOBS:-$(($(nproc) + 1))}" "$@" || ctest_status=$?
if [[ -n $tidy_pid ]]; then
  tidy_status=0
  wait "$tidy_pid" || tidy_status=$?
  cat "$tidy_log"
  rm -f "$tidy_log"
  [[ $tidy_status -eq 0 ]] || exit "$tidy_status"
fi
exit "$ctest_status"
