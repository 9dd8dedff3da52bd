#!/usr/bin/env bash
# Where std::filesystem binds in the device build (trap 2, docs/gpu.md), for scripts/gpu-check.sh's
# ctest.log: the compiler and its libstdc++ (static or shared), DT_NEEDED in order, the link command
# of mha_core_tests, who exports the symbols, LD_DEBUG=bindings of one temp-dir suite. If that
# suite still crashes, it relinks mha_core_tests with the compiler's own std::filesystem members on
# the spot and runs the temp-dir suites again (the alternative fix, tried in the same call).
#   scripts/gpu-linkage-report.sh BUILD_DIR SCRATCH_DIR
set -uo pipefail
build=${1:?usage: gpu-linkage-report.sh BUILD_DIR SCRATCH_DIR}
bdir=${2:?usage: gpu-linkage-report.sh BUILD_DIR SCRATCH_DIR}
# Trap 2 on the device (2026-11-26: the temp-dir suites still crashed with libstdc++ first on the
# link line): where std::filesystem binds, and why.
echo "## compiler and its libstdc++"; "${CXX:-c++}" --version 2>&1 | head -1
cc_bin=$(awk -F= '/^CMAKE_CXX_COMPILER:/ {print $2}' "$build/CMakeCache.txt")
echo "$cc_bin: $("$cc_bin" --version 2>&1 | head -1); libstdc++.so: $("$cc_bin" -print-file-name=libstdc++.so)"
echo "## DT_NEEDED, in order"
for b in tests/unit/mha_core_tests server/mha-server; do
  echo "$b: $(readelf -d "$build/$b" 2>/dev/null | awk '/NEEDED/ {gsub(/[][]/, "", $5); printf "%s ", $5}')"
done
echo "## the link command of mha_core_tests"; ninja -C "$build" -t commands tests/unit/mha_core_tests | tail -1 | cut -c1-3000
echo "## libstdc++ / libtorch: who defines remove_all"
tlib=$(dirname "$(ldd "$build/tests/unit/mha_core_tests" | awk '/libtorch.so / {print $3}')")
for so in $(ldd "$build/tests/unit/mha_core_tests" | awk '/libstdc\+\+|libtorch|libc10/ {print $3}'); do
  echo "$so: $(nm -D --defined-only "$so" 2>/dev/null | grep -c '_ZNSt10filesystem') std::filesystem symbols;" \
    "$(nm -D --defined-only "$so" 2>/dev/null | grep 'remove_all' | head -2 | tr '\n' ' ')"
done
echo "## bindings of one temp-dir suite (LD_DEBUG=bindings)"
LD_DEBUG=bindings LD_DEBUG_OUTPUT="$bdir/ld" timeout 60 "$build"/tests/unit/mha_core_tests \
  --gtest_filter='LoaderConfig.*' > "$bdir/ld.out" 2>&1; echo "rc=$?"; tail -3 "$bdir/ld.out"
cat "$bdir"/ld.* 2>/dev/null | grep -E 'filesystem' | grep -v 'ld.out' | sed 's/^ *[0-9]*: *//' | sort | uniq -c |
  sort -rn | head -30
echo "## toolchain: configure line, specs naming static libstdc++, libstdc++.a/.so it links"
"$cc_bin" -v 2>&1 | grep -E '^Configured with' | tr ' ' '\n' | grep -E 'static|shared|prefix=|libstdcxx' | head
"$cc_bin" -dumpspecs 2>/dev/null | grep -n -E 'static-libstdc|static-libgcc' | head -5
echo "libstdc++.a: $("$cc_bin" -print-file-name=libstdc++.a)  libstdc++.so.6: $("$cc_bin" -print-file-name=libstdc++.so.6)"
echo "## mha_core_tests: std::filesystem defined in the binary itself (nm --defined-only)"
nm -C --defined-only "$build/tests/unit/mha_core_tests" 2>/dev/null | grep -c 'std::filesystem::' || true
# Still crashing: try the alternative on the spot. Relink mha_core_tests with the compiler's own
# std::filesystem members (fs_ops.o fs_path.o fs_dir.o of its libstdc++.a) first on the line, so
# the binary defines std::filesystem whatever its libstdc++ is; run the same suite.
if ! timeout 60 "$build"/tests/unit/mha_core_tests --gtest_filter='LoaderConfig.*' > /dev/null 2>&1; then
  echo "## probe: relink with the compiler's fs_*.o in the binary"
  mkdir -p "$bdir/fs" && (cd "$bdir/fs" && ar x "$("$cc_bin" -print-file-name=libstdc++.a)" fs_ops.o fs_path.o fs_dir.o) &&
    cmd=$(ninja -C "$build" -t commands tests/unit/mha_core_tests | tail -1) &&
    cmd=${cmd/-o tests\/unit\/mha_core_tests /-o tests/unit/mha_core_tests.fsprobe $bdir/fs/fs_ops.o $bdir/fs/fs_path.o $bdir/fs/fs_dir.o } &&
    (cd "$build" && eval "$cmd") && timeout 120 "$build"/tests/unit/mha_core_tests.fsprobe \
      --gtest_filter='LoaderConfig.*:Loader*:Safetensors*:TorchSaveFormat*:WeightsFormat*:LlamaWeights*' 2>&1 | tail -4
  echo "probe rc=${PIPESTATUS[0]}"
fi
