#!/usr/bin/env bash
# scripts/lint.sh format            clang-format --dry-run -Werror over every tracked C++ file
# scripts/lint.sh tidy [all|FILE…]  clang-tidy (.clang-tidy) against build/compile_commands.json
#
# The test command (scripts/test.sh) runs `format` before the build and `tidy` after it. Plain
# `tidy` checks the translation units that include neither ATen nor the generated protos' heaviest
# users: mha_base, proto/wire, the torch-free client library and its pictures (~2 min on 2
# cores); `tidy all` checks every project translation unit (~30+ min on 2 cores: run it before a
# large change lands).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-format}
shift || true
case "$mode" in
  format)
    mapfile -t files < <(git ls-files '*.cc' '*.h' | while read -r f; do [[ -f $f ]] && echo "$f"; done)
    clang-format --dry-run -Werror "${files[@]}"
    echo "lint: clang-format clean over ${#files[@]} files"
    ;;
  tidy)
    build_dir=${MHA_BUILD_DIR:-build}
    [[ -f $build_dir/compile_commands.json ]] || { echo "lint: no $build_dir/compile_commands.json (build first)" >&2; exit 1; }
    if [[ ${1:-} == all ]]; then
      mapfile -t files < <(git ls-files '*.cc' | grep -vE '^tests/fuzz/|^bench/')
    elif [[ $# -gt 0 ]]; then
      files=("$@")
    else
      files=(core/src/base/status.cc core/src/base/options.cc core/src/base/shape_string.cc
        core/src/base/text.cc
        proto/wire/dtype_table.cc proto/wire/tensor_header.cc proto/wire/status_convert.cc
        client/channel.cc client/credentials.cc client/mha_client.cc client/oip_translate.cc
        client/bench/bench_runner.cc client/bench/bench_tally.cc client/bench/decode_bench.cc
        client/bench/server_cpu.cc client/plot/canvas.cc client/plot/colour.cc client/plot/axes.cc
        client/plot/figure.cc client/plot/attention_figure.cc client/plot/analysis_figure.cc
        client/plot/latency_figure.cc)
    fi
    jobs=${MHA_TIDY_JOBS:-$(nproc)}
    out=$(mktemp)
    db=$(mktemp -d)
    # Each file of a unity target with its target's command (scripts/compile_db.py).
    # `all` lists every tracked file, some built only in a CUDA build: those are guessed at.
    if [[ ${1:-} == all ]]; then scripts/compile_db.py "$build_dir" "$db"
    else scripts/compile_db.py "$build_dir" "$db" "${files[@]}"; fi
    status=0
    printf '%s\n' "${files[@]}" | xargs -P "$jobs" -n 2 clang-tidy -p "$db" --quiet \
      >"$out" 2>&1 || status=$?
    grep -vE '^[0-9]+ warnings? generated\.|^Suppressed [0-9]+ warnings|^Use -header-filter' "$out" || true
    rm -rf "$out" "$db"
    if [[ $status -ne 0 ]]; then
      echo "lint: clang-tidy found problems (above)" >&2
      exit 1
    fi
    echo "lint: clang-tidy clean over ${#files[@]} files"
    ;;
  *) echo "usage: $0 format | tidy [all|FILE...]" >&2; exit 2 ;;
esac
