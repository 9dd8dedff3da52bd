#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS [LIBFUZZER_FLAGS...]]
# Builds the libFuzzer targets (clang, ASan + UBSan) into build-fuzz/ and runs each for SECONDS
# (default 60), one after another on one core. Seeds: tests/fixtures, tests/fuzz/seeds/<target>,
# tests/fuzz/regressions/<target>; the growing corpus stays in build-fuzz/corpus/<target>.
# Crashes, leaks and sanitizer reports land in tests/fuzz/regressions/<target>/ (keep each one,
# with its fix, so the normal test suite replays it). MHA_FUZZ_TARGETS="safetensors ..." runs a
# subset; MHA_FUZZ_JOBS (default 1) parallel jobs per target.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true  # anything after SECONDS goes to libFuzzer, e.g. -fork=1 -ignore_crashes=1
build_dir=${MHA_FUZZ_BUILD_DIR:-build-fuzz}
targets=${MHA_FUZZ_TARGETS:-safetensors torch_save weights_format config_json forward_request model_infer_request}
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ missing (apt-get install clang)" >&2; exit 1; }

CC=clang CXX=clang++ cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMHA_FUZZ=ON -DMHA_BUILD_TESTS=OFF -DMHA_BUILD_BENCHMARKS=OFF -DMHA_BUILD_SERVICE=ON
cmake --build "$build_dir" -j"${MHA_FUZZ_BUILD_JOBS:-2}" $(for t in $targets; do echo --target "fuzz_$t"; done)

# JSON targets get a dictionary whose tokens reach deep nesting within max_len (the parsers refuse
# more than 64 levels before building a tree: core/src/load/json_text.h).
dict_for() {
  case $1 in
    config_json | safetensors) echo "-dict=tests/fuzz/dicts/json.dict" ;;
  esac
}

max_len() {
  case $1 in
    config_json) echo 4096 ;;
    forward_request | model_infer_request) echo 65536 ;;
    *) echo 16384 ;;
  esac
}

# LibTorch is not instrumented; leaks inside it are suppressed (see tests/sanitize/lsan.supp).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/sanitize/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for t in $targets; do
  corpus=$build_dir/corpus/$t
  regressions=tests/fuzz/regressions/$t
  mkdir -p "$corpus" "$regressions"
  seeds=(tests/fixtures)
  [[ -d tests/fuzz/seeds/$t ]] && seeds+=("tests/fuzz/seeds/$t")
  echo "== fuzz_$t for ${seconds}s" >&2
  log=$build_dir/fuzz_$t.log
  jobs=()
  [[ ${MHA_FUZZ_JOBS:-1} -gt 1 ]] && jobs=(-jobs="$MHA_FUZZ_JOBS" -workers="$MHA_FUZZ_JOBS")
  set +e
  "$build_dir/fuzz/fuzz_$t" "$corpus" "${seeds[@]}" "$regressions" "${jobs[@]}" \
    -max_total_time="$seconds" -max_len="$(max_len "$t")" -timeout=10 -rss_limit_mb=4096 \
    -artifact_prefix="$regressions/" -print_final_stats=1 $(dict_for "$t") "$@" >"$log" 2>&1
  rc=$?
  set -e
  grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)|^#[0-9]+: cov|ERROR|SUMMARY|^stat::|INFO: exiting' "$log" | tail -n 20 >&2
  if [[ $rc -ne 0 ]]; then
    echo "fuzz_$t: FAILED (rc $rc), see $log and $regressions/" >&2
    status=1
  fi
done
exit $status
