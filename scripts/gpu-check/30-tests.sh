# Sourced by scripts/gpu-check.sh (the driver: its variables, and the functions of the files
# before this one, in file-name order): the rest of the build (step buildrest), then the tests on
# CUDA (steps ctest, coretest, streamtest).
# ---- 3b. Every other target (tests, benches), after the rows: what is left of the budget --------
step buildrest 300 "$blog" nice ninja -C "$build" -j"$jobs" -k 0
if grep -q '^===== \[buildrest\] rc=[1-9]' "$blog"; then
  { python3 scripts/build_errors.py "$blog"
    [ -f "$bdir/errors-graphs.txt" ] && { echo; echo "## $(cat "$bdir/errors-graphs.what")"; cat "$bdir/errors-graphs.txt"; }
  } > "$OUT/errors.txt" 2>&1
fi
[ -f "$build/build.ninja" ] && save_mtimes
# ---- 4. Tests on CUDA --------------------------------------------------------------------------
tlog=$OUT/ctest.log; : > "$tlog"
{ echo "## binaries link libtorch_cuda (else at::hasCUDA() is false: --as-needed dropped it)?"
  for b in tests/unit/mha_core_tests tests/service/mha-test-server server/mha-server bench/mha_core_bench; do
    echo "$b: $(ldd "$build/$b" 2>/dev/null | grep -cE 'libtorch_cuda|libc10_cuda') cuda libs, $(ldd "$build/$b" 2>/dev/null | grep -c 'not found') not found"
  done
  echo "## unit test cases on cuda:"; "$build"/tests/unit/mha_core_tests --gtest_list_tests 2>&1 | grep -c cuda
  scripts/gpu-linkage-report.sh "$build" "$bdir"  # trap 2: where std::filesystem binds, and why
  } >> "$tlog" 2>&1
# Streams, pinned staging, the blocking device wait and CUDA graphs (device_stream_test.cc,
# cuda_graphs_test.cc), the default device warm-up (tests/unit/serving/device_warmup_test.cc: graphs
# once per version), and the cases mended after the 2026-11-28 lease (blocked attention's tied
# top-k, the padded steps' op counts, the warm-up's planned passes): run alone, before ctest,
# verbose; a skip of a CUDA case counts as a failure here (it would mean the binary sees no GPU).
streamtest() {
  "$build"/tests/unit/mha_core_tests --gtest_filter='DeviceStream*:DeviceWait*:CudaGraph*:*Blocked*:*Padded*' 2>&1 | tee "$bdir/streamtest.txt"
  local rc=${PIPESTATUS[0]}
  if [ -x "$build"/tests/unit/mha_serving_tests ]; then
    "$build"/tests/unit/mha_serving_tests --gtest_filter='DeviceWarmup*:ModelLifecycle*:ServerCore*' 2>&1 | tee -a "$bdir/streamtest.txt"
    local warm=${PIPESTATUS[0]}
    [ "$warm" = 0 ] || rc=$warm
  fi
  if grep -E '^\[  SKIPPED \]' "$bdir/streamtest.txt" | grep -qi cuda; then echo "streamtest: skipped cases"; return 3; fi
  return "$rc"
}
export -f streamtest
built streamtest tests/unit/mha_core_tests && step streamtest 60 "$tlog" streamtest
built ctest tests/unit/mha_core_tests && step ctest 180 "$tlog" env MHA_DEVICE=cuda MHA_PYTHON="$(command -v python3)" MHA_NGINX="$prefix/usr/sbin/nginx" ctest --test-dir "$build" -L 'unit|service' -j8 \
  --output-on-failure --timeout 120
# Every mha_core_tests case on CUDA: shorter than ctest when only the core changed (not a default).
coretest() { "$build"/tests/unit/mha_core_tests --gtest_brief=1 2>&1 | tail -40; return "${PIPESTATUS[0]}"; }
export -f coretest
built coretest tests/unit/mha_core_tests && step coretest 150 "$tlog" coretest
