#!/usr/bin/env bash
# The one command to run on the GPU device (issue 18): risks, build against the device's LibTorch
# and the carried prefix, tests on CUDA, benchmarks. Every step records its result and the script
# goes on; what comes back is $OUT (8 files, flat, each under 16 MiB): risks.log.gz, build.log.gz,
# ctest.log.gz, bench.log.gz, profile.log.gz (gzip -9), errors.txt (scripts/build_errors.py: the first failed edges
# in full, every undefined symbol demangled and deduplicated), torch_ref.json and summary.json.
# A step whose binaries did not build is recorded as needs-build, with one line naming them.
#
#   device call:  scripts/gpu-check.sh   (carry: [".device-deps"] only; never carry build-cuda: a
#                 carried path absent here is removed there, while ignored build outputs stay
#                 on a warm machine between calls)
#   env knobs:    OUT (default /tmp/gpu-check-out), GPU_CHECK_BUDGET (seconds, default 530),
#                 GPU_CHECK_STEPS (default "risks unpack torchref configure build ctest streamtest
#                 corebench paired streambench servebench profile goals"; also coretest: every
#                 mha_core_tests case, a shorter check than ctest's tiers; a second call on the warm machine, e.g.
#                 GPU_CHECK_STEPS="streamtest streambench", reuses build-cuda: the carried
#                 prefix is unpacked again only when its MANIFEST changed, and sources whose
#                 content did not change get back the mtimes of the last build, so a fresh copy
#                 of the tree does not rebuild everything),
#                 JOBS (default nproc), MHA_DEPS_PREFIX (default /tmp/mha-deps), BUILD (build-cuda)
# Prepare here first: scripts/device-deps.sh download .device-deps   (Debian 12 host).
# Tests pick CUDA by themselves when at::hasCUDA() (tests/unit/core/model_test.cc runs cpu + cuda,
# tests/unit/core/device_stream_test.cc its DeviceStreamCudaTest cases: streams, pinned staging);
# servers started by the service tests get MHA_DEVICE=cuda (server flag --device's env name).
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
OUT=${OUT:-/tmp/gpu-check-out}; mkdir -p "$OUT"
budget=${GPU_CHECK_BUDGET:-530}
steps=${GPU_CHECK_STEPS:-risks unpack torchref configure build ctest streamtest corebench paired streambench servebench profile goals}
jobs=${JOBS:-$(nproc)}
prefix=${MHA_DEPS_PREFIX:-/tmp/mha-deps}
build=${BUILD:-build-cuda}
bdir=$(mktemp -d)   # raw benchmark JSON, folded into summary.json
start=$(date +%s)
results=$OUT/.steps.tsv; : > "$results"   # removed at the end (summary.json carries it)
risks=$OUT/risks.log; : > "$risks"

remaining() { echo $((budget - ($(date +%s) - start))); }
# built NAME BIN...: true when every BIN exists in the build; else records NAME as needs-build and
# says so in one line (the build log and errors.txt say why).
built() {
  local name=$1 b missing=(); shift
  case " $steps " in *" $name "*) ;; *) return 0 ;; esac  # step() records it as skipped
  for b in "$@"; do [ -x "$build/$b" ] || missing+=("$b"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  printf '%s	needs-build	0
' "$name" >> "$results"
  echo "gpu-check: $name not run: needs ${missing[*]}, which did not build (errors.txt)"
  return 1
}
# step NAME CAP LOG CMD...: runs CMD with timeout min(CAP, what is left - 10 s), records rc + time.
step() {
  local name=$1 cap=$2 log=$3; shift 3
  case " $steps " in *" $name "*) ;; *) printf '%s\tskipped\t0\n' "$name" >> "$results"; return 0 ;; esac
  local left; left=$(( $(remaining) - 10 ))
  if [ "$left" -lt 15 ]; then printf '%s\tno-time\t0\n' "$name" >> "$results"; return 1; fi
  [ "$cap" -le "$left" ] || cap=$left
  local t0 rc; t0=$(date +%s)
  echo "===== [$name] $(date -u +%H:%M:%S) cap ${cap}s: $*" >> "$log"
  if declare -F "$1" >/dev/null; then  # a function of this script: run it in a child bash
    timeout --kill-after=5 "$cap" bash -c "$1" >> "$log" 2>&1; rc=$?
  else
    timeout --kill-after=5 "$cap" "$@" >> "$log" 2>&1; rc=$?
  fi
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" >> "$results"
  echo "===== [$name] rc=$rc in $(( $(date +%s) - t0 ))s" >> "$log"
  echo "gpu-check: $name rc=$rc ($(( $(date +%s) - t0 ))s)"
  return $rc
}

# ---- 1. Risks first (cheap, recorded even if everything after fails) ---------------------------
risks_step() {
  echo "## machine"; uname -a; nproc; free -g | head -2; cat /etc/os-release | head -4
  echo "## glibc here (Debian 12 libs need <= 2.36)"; ldd --version | head -1
  echo "## libstdc++ here: newest GLIBCXX / CXXABI (Debian 12 libs need <= GLIBCXX_3.4.30)"
  libstdcxx=$(ldconfig -p | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')
  echo "$libstdcxx"; strings "$libstdcxx" 2>/dev/null | grep -E '^GLIBCXX_[0-9.]+$' | sort -V | tail -1
  echo "## GPU"; nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1 | head -3
  echo "## nvcc"; command -v nvcc || ls -d /usr/local/cuda*/bin/nvcc 2>/dev/null; nvcc --version 2>&1 | tail -2
  echo "## cmake / ninja / python"; cmake --version | head -1; ninja --version; python3 --version
  echo "## torch"
  python3 - <<'PY'
import torch, os
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
print("CXX11 ABI", torch._C._GLIBCXX_USE_CXX11_ABI, "(Debian 12 libs: new ABI = True needed)")
print("cmake_prefix_path", torch.utils.cmake_prefix_path)
print("lib dir", os.path.join(os.path.dirname(torch.__file__), "lib"))
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))
try:
    import grpc, google.protobuf, numpy
    print("grpcio", grpc.__version__, "protobuf", google.protobuf.__version__, "numpy", numpy.__version__)
except Exception as e:
    print("python deps:", e)
PY
  tlib=$(python3 -c 'import torch,os;print(os.path.join(os.path.dirname(torch.__file__),"lib"))' 2>/dev/null)
  echo "## protobuf symbols exported by LibTorch (clash risk with Debian's libprotobuf.so.32)"
  for so in "$tlib"/libtorch_cpu.so "$tlib"/libtorch.so "$tlib"/libc10.so; do
    [ -f "$so" ] || continue
    n=$(nm -D --defined-only "$so" 2>/dev/null | c++filt | grep -c 'google::protobuf' || true)
    echo "$(basename "$so"): $n exported google::protobuf symbols"
    nm -D --defined-only "$so" 2>/dev/null | c++filt | grep 'google::protobuf' | head -3
  done
  ldd "$tlib/libtorch_cpu.so" 2>/dev/null | grep -i 'protobuf\|not found' || echo "libtorch_cpu.so: no libprotobuf.so dependency"
  true
}

# ---- 2. Unpack the carried bundle --------------------------------------------------------------
unpack_step() {
  [ -f .device-deps/MANIFEST ] || { echo "no .device-deps/MANIFEST: carry .device-deps"; return 1; }
  # The same bundle as last time: keep the prefix (fresh files would make every object stale).
  if cmp -s .device-deps/MANIFEST "$prefix/.manifest"; then echo "prefix $prefix is current"; return 0; fi
  rm -rf "$prefix"
  scripts/device-deps.sh unpack .device-deps "$prefix" && cp .device-deps/MANIFEST "$prefix/.manifest"
}
# Source files -> sha1 and mtime after a build; before the next, files whose content is the same
# get their old mtime back (the device receives a fresh copy of the tree on every call).
source_files() { find . \( -path './build*' -o -path "./$build" -o -path ./.git -o -path ./.device-deps \) \
  -prune -o -type f -print; }
save_mtimes() { source_files | xargs -d '\n' stat -c '%Y %n' | while read -r t f; do
  echo "$t $(sha1sum "$f" | cut -c1-40) $f"; done > "$build/.gpu-check-mtimes"; }
restore_mtimes() {
  [ -f "$build/.gpu-check-mtimes" ] || return 0
  local t h f n=0
  while read -r t h f; do
    [ -f "$f" ] && [ "$(sha1sum "$f" | cut -c1-40)" = "$h" ] && touch -m -d "@$t" "$f" && n=$((n + 1))
  done < "$build/.gpu-check-mtimes"
  echo "gpu-check: $n unchanged sources keep the last build's mtimes"
}

export prefix build bdir
export -f risks_step unpack_step
step risks 40 "$risks" risks_step
step unpack 60 "$risks" unpack_step
# Python (torch, grpcio) keeps the device's own libraries: the carried libssl/libcurl/... are put
# on LD_LIBRARY_PATH for the C++ build and tests only.
orig_ld=${LD_LIBRARY_PATH-}
export MHA_ORIG_LD_LIBRARY_PATH=$orig_ld  # for the Python steps of scripts/gpu-profile.sh
[ -d "$prefix/usr" ] && eval "$(scripts/device-deps.sh env "$prefix")"
# The prefix's GLIBC needs, now that it exists (the risk the issue names first).
{ echo "## carried libraries: newest GLIBC / GLIBCXX needed"
  objdump -T "$prefix"/usr/lib/x86_64-linux-gnu/*.so.* "$prefix"/usr/bin/* 2>/dev/null |
    grep -oE 'GLIBC_[0-9.]+|GLIBCXX_[0-9.]+|CXXABI_[0-9.]+' | sort -uV | awk -F_ '{v[$1]=$0} END {for (k in v) print v[k]}' 
  echo "## carried libraries/tools with unresolved deps here (libcurl's krb5/ldap chain is expected"
  echo "## and harmless: only CMake's FindCURL needs libcurl.so, nothing links prometheus-cpp::push)"
  for f in "$prefix"/usr/lib/x86_64-linux-gnu/*.so.* "$prefix"/usr/bin/*; do
    [ -L "$f" ] && continue
    m=$(ldd "$f" 2>/dev/null | grep 'not found' | awk '{print $1}' | tr '\n' ' ')
    [ -z "$m" ] || echo "$(basename "$f"): $m"
  done
  echo "## carried tools run here?"; protoc --version 2>&1; grpc_cpp_plugin --version 2>&1 | head -1
  "${PKG_CONFIG:-pkg-config}" --modversion cpp-httplib re2 2>&1; } >> "$risks" 2>&1

# ---- 2b. PyTorch's own numbers first: they need no build (a call whose build fails keeps them).
step torchref 110 "$OUT/bench.log" env LD_LIBRARY_PATH="$orig_ld" python3 bench/torch_gpu_reference.py --out "$OUT/torch_ref.json"
# ---- 3. Configure + build ----------------------------------------------------------------------
torch_cmake=$(LD_LIBRARY_PATH="$orig_ld" python3 -c 'import torch;print(torch.utils.cmake_prefix_path)' 2>/dev/null)
nvcc_bin=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
cap=$(LD_LIBRARY_PATH="$orig_ld" python3 -c 'import torch;m,n=torch.cuda.get_device_capability(0);print(f"{m}.{n}")' 2>/dev/null || echo 9.0)
cuda_args=()
[ -z "$nvcc_bin" ] || cuda_args+=("-DCMAKE_CUDA_COMPILER=$nvcc_bin" "-DCUDAToolkit_ROOT=$(dirname "$(dirname "$nvcc_bin")")")
blog=$OUT/build.log; : > "$blog"
restore_mtimes
step configure 120 "$blog" cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix/usr;$torch_cmake" -DTORCH_CUDA_ARCH_LIST="$cap" "${cuda_args[@]}"
if grep -q 'CUDA support: ON' "$blog"; then cuda_on=true; else cuda_on=false; fi
echo "gpu-check: CUDA support: $cuda_on"
# -k 0: one call shows every compile error, not only the first.
step build 340 "$blog" nice ninja -C "$build" -j"$jobs" -k 0
python3 scripts/build_errors.py "$blog" > "$OUT/errors.txt" 2>&1
# CUDA graphs are the one unit written against LibTorch's CUDA API without a CUDA machine to
# compile it on: if that unit is what failed, build on without it (eager passes only).
if grep -q 'cuda_graphs\.cc' "$OUT/errors.txt" && grep -q 'MHA_CUDA_GRAPHS:BOOL=ON' "$build/CMakeCache.txt"; then
  echo "gpu-check: core/src/cuda_graphs.cc failed: building with -DMHA_CUDA_GRAPHS=OFF"
  mv "$OUT/errors.txt" "$bdir/errors-graphs.txt"
  steps="$steps configure-nographs build-nographs"
  step configure-nographs 60 "$blog" cmake -S . -B "$build" -DMHA_CUDA_GRAPHS=OFF
  step build-nographs 200 "$blog" nice ninja -C "$build" -j"$jobs" -k 0
  { python3 scripts/build_errors.py "$blog"; echo; echo "## the build with MHA_CUDA_GRAPHS=ON"
    cat "$bdir/errors-graphs.txt"; } > "$OUT/errors.txt" 2>&1
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
built ctest tests/unit/mha_core_tests && step ctest 180 "$tlog" env MHA_DEVICE=cuda MHA_PYTHON="$(command -v python3)" MHA_NGINX="$prefix/usr/sbin/nginx" ctest --test-dir "$build" -L 'unit|service' -j8 \
  --output-on-failure --timeout 120
# Every mha_core_tests case on CUDA: shorter than ctest when only the core changed (not a default).
coretest() { "$build"/tests/unit/mha_core_tests --gtest_brief=1 2>&1 | tail -40; return "${PIPESTATUS[0]}"; }
export -f coretest
built coretest tests/unit/mha_core_tests && step coretest 150 "$tlog" coretest
# Streams, pinned staging and CUDA graphs (device_stream_test.cc, cuda_graphs_test.cc): run alone, verbose; a skip
# counts as a failure here (it would mean the binary sees no GPU).
streamtest() {
  "$build"/tests/unit/mha_core_tests --gtest_filter='DeviceStream*:CudaGraph*' 2>&1 | tee "$bdir/streamtest.txt"
  local rc=${PIPESTATUS[0]}
  if grep -q '^\[  SKIPPED \]' "$bdir/streamtest.txt"; then echo "streamtest: skipped cases"; return 3; fi
  return "$rc"
}
export -f streamtest
built streamtest tests/unit/mha_core_tests && step streamtest 60 "$tlog" streamtest

# ---- 5. Benchmarks: in-process core (3 shapes x fp16/bf16, decode steps) and PyTorch's own -------
corebench() {
  for shape in 8,128,512,8 32,1024,1024,16 4,4096,2048,16; do
    for dt in float16 bfloat16; do
      echo "### shape B,T,E,H=$shape dtype=$dt"
      MHA_BENCH_DEVICE=cuda MHA_BENCH_DTYPE=$dt MHA_BENCH_SHAPE=$shape "$build"/bench/mha_core_bench \
        --benchmark_filter='^BM_(Forward|ForwardQueued|AttentionStep|Matmul1024)/' \
        --benchmark_min_time=0.2 --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
        --benchmark_out="$bdir/core_${shape//,/_}_$dt.json" --benchmark_out_format=json || echo "rc=$?"
    done
  done  # then decode steps: what the server runs (0), padded (1), a gather per session (2)
  MHA_BENCH_DEVICE=cuda MHA_BENCH_DTYPE=float16 "$build"/bench/mha_decode_bench --benchmark_filter='^BM_DecodeSteps/' --benchmark_min_time=0.2 || echo "rc=$?"
}
export -f corebench
built corebench bench/mha_core_bench && step corebench 180 "$OUT/bench.log" corebench
# The same comparison in turns (bench/paired_gpu_ratio.py: PyTorch and the core alternating, each
# case for the same time, clocks read after each side): the ratios issue 35's table reports.
paired() {
  env LD_LIBRARY_PATH="$MHA_ORIG_LD_LIBRARY_PATH" MHA_BENCH_LD_LIBRARY_PATH="${LD_LIBRARY_PATH-}" \
    python3 bench/paired_gpu_ratio.py --bench "$build/bench/mha_core_bench" --out "$bdir/paired.json" \
    2>&1 >/dev/null
}
export -f paired
built paired bench/mha_core_bench && step paired 240 "$OUT/bench.log" paired

# Served on the device (issue 18's serving figures, fp16 on cuda, server + client on loopback):
# served / in-process at B=8 T=128 and the p50 added at B=1 T=16 (client/served_vs_local.py, both
# sides on cuda), 64 concurrent small requests with batching on vs off (bench/batching_on_off.sh)
# and on with --max-batch-tokens 8192 instead of 2048, and decoding sessions on the GPU: one
# session alone vs 64 at once (mha-client decode).
servebench() {
  local gpu=(--device "${SERVE_DEVICE:-cuda}" --dtype "${SERVE_DTYPE:-float16}")  # cpu: a dry run
  echo "### served_vs_local big"; python3 client/served_vs_local.py --build "$build" big \
    --rounds 3 --seconds 1 "${gpu[@]}" 2>&1 | tail -3
  echo "### served_vs_local small"; python3 client/served_vs_local.py --build "$build" small \
    --rounds 3 --seconds 1 "${gpu[@]}" 2>&1 | tail -3
  echo "### batching_on_off"; DUR=3 MHA_BUILD_DIR="$build" bench/batching_on_off.sh "${gpu[@]}" 2>&1 |
    grep -E '^== batching|throughput|latency|metrics:'
  # The same load with merged passes of up to 8192 tokens (the default 2048 is the CPU's sweet spot).
  echo "### batching_on max_batch_tokens=8192"; DUR=3 MODES=on MHA_BUILD_DIR="$build" \
    bench/batching_on_off.sh "${gpu[@]}" --max-batch-tokens 8192 2>&1 |
    grep -E '^== batching|throughput|latency|metrics:'
  local work; work=$(mktemp -d)
  "$build"/server/mha-server --grpc-address 127.0.0.1:0 --port-file "$work/port" --log-level warn \
    --http-address 127.0.0.1:0 "${gpu[@]}" > "$work/server.log" 2>&1 &
  local pid=$! i
  for i in $(seq 120); do [ -s "$work/port" ] && break; sleep 0.5; done
  for sessions in 1 64; do
    echo "### decode sessions=$sessions"
    "$build"/client/mha-client --target "127.0.0.1:$(cat "$work/port")" decode --sessions "$sessions" \
      --tokens $(( sessions == 1 ? 256 : 64 )) 2>&1 | grep -E '^decode|^throughput|^step latency|error'
  done
  kill "$pid"; wait "$pid"; tail -3 "$work/server.log"; rm -rf "$work"
}
export -f servebench
built servebench server/mha-server client/mha-client &&
  step servebench 180 "$OUT/bench.log" servebench
# Issue 26's goal table (bench/run_all.sh, docs/performance.md): the echo floor, server CPU per
# request and efficiency against the same run's matmul, c=1 added p50, big served/in-process,
# decode CPU per step, session vs stateless, batching on/off, both sides on SERVE_DEVICE. A dry
# run on a CPU box: GPU_CHECK_STEPS=goals SERVE_DEVICE=cpu SERVE_DTYPE=float32 BUILD=build
# scripts/gpu-check.sh
goals() {
  bench/run_all.sh --build "$build" --quick --device "${SERVE_DEVICE:-cuda}" \
    --dtype "${SERVE_DTYPE:-float16}"
}
export -f goals
# Where the time goes: mha_core's kernels per pass (ncu) beside PyTorch's (torch.profiler).
built profile bench/mha_core_bench && step profile 300 "$OUT/profile.log" scripts/gpu-profile.sh "$build"
# Host query -> pinned staging -> GPU -> pinned outputs, 1 vs 2 threads (two instances, each on its
# own pool stream): summary.json's stream_overlap is passes/s at 2 threads over 1.
streambench() {
  for shape in 8,128,512,8 32,1024,1024,16; do
    echo "### BM_ForwardHost shape B,T,E,H=$shape dtype=float16"
    MHA_BENCH_DEVICE=cuda MHA_BENCH_DTYPE=float16 MHA_BENCH_SHAPE=$shape "$build"/bench/mha_core_bench \
      --benchmark_filter='^BM_ForwardHost/' --benchmark_min_time=0.2 --benchmark_repetitions=3 \
      --benchmark_report_aggregates_only=true --benchmark_out_format=json \
      --benchmark_out="$bdir/stream_${shape//,/_}_float16.json" || echo "rc=$?"
  done
}
export -f streambench
built streambench bench/mha_core_bench && step streambench 60 "$OUT/bench.log" streambench
built goals server/mha-server client/mha-client bench/mha_echo_floor &&
  step goals 150 "$OUT/bench.log" goals

# ---- 6. summary.json -----------------------------------------------------------------------------
python3 - "$results" "$bdir" "$OUT" "$cuda_on" "$(git rev-parse HEAD 2>/dev/null)" <<'PY'
import glob, json, os, re, sys, datetime
results, bdir, out, cuda_on, commit = sys.argv[1:6]
s = {"date": datetime.datetime.utcnow().isoformat() + "Z", "commit": commit,
     "cuda_support": cuda_on == "true", "steps": {}}
for line in open(results):
    name, rc, secs = line.rstrip("\n").split("\t")
    s["steps"][name] = {"rc": rc, "seconds": int(secs)}
risks = open(os.path.join(out, "risks.log"), errors="replace").read()
for key, pat in {"glibc": r"ldd \(.*?\) ([0-9.]+)", "torch": r"^torch (\S+)",
                 "cxx11_abi": r"CXX11 ABI (\w+)", "device": r"^device (.+)$"}.items():
    m = re.search(pat, risks, re.M)
    s[key] = m.group(1) if m else None
s["libtorch_protobuf_exports"] = re.findall(r"^(\S+): (\d+) exported google::protobuf", risks, re.M)
ctest = open(os.path.join(out, "ctest.log"), errors="replace").read()
# "98% tests passed, 3 tests failed out of 135", or "100% tests passed out of 135" when none failed.
m = re.search(r"(\d+)% tests passed(?:, (\d+) tests failed)? out of (\d+)", ctest)
s["ctest"] = {"passed_pct": int(m.group(1)), "failed": int(m.group(2) or 0), "total": int(m.group(3))} if m else None
s["ctest_failed"] = re.findall(r"^\s*\d+ - (\S+) \(", ctest, re.M)[:40]
core = {}
for f in sorted(glob.glob(os.path.join(bdir, "core_*.json"))):
    key = os.path.basename(f)[5:-5]
    try:
        for b in json.load(open(f))["benchmarks"]:
            if b.get("aggregate_name") == "median":
                core[f"{key}/{b['run_name']}"] = {k: b[k] for k in ("real_time", "time_unit", "passes/s", "GFLOP/s") if k in b}
    except Exception as e:
        core[key] = {"error": str(e)}
s["core_bench"] = core
stream = {}
for f in sorted(glob.glob(os.path.join(bdir, "stream_*.json"))):
    key = os.path.basename(f)[7:-5]
    try:
        for b in json.load(open(f))["benchmarks"]:
            if b.get("aggregate_name") == "median" and "passes/s" in b:
                stream[f"{key}/{b['run_name']}"] = b["passes/s"]
    except Exception as e:
        stream[key] = str(e)
s["stream_bench_passes_per_s"] = stream
s["stream_overlap"] = {k.replace("/threads:2", ""): v / stream[k.replace("threads:2", "threads:1")]
                       for k, v in stream.items() if k.endswith("/threads:2")
                       and isinstance(v, float) and stream.get(k.replace("threads:2", "threads:1"))}
# servebench's lines, as printed (bench.log has the rest).
bench_log = open(os.path.join(out, "bench.log"), errors="replace").read()
serve = bench_log.split("[servebench]", 1)[1] if "[servebench]" in bench_log else ""
s["serve_bench"] = [l for l in serve.splitlines()
                    if re.match(r"(###|median:|throughput:|step latency|metrics:|== batching)", l)]
goals = bench_log.split("[goals]", 1)[1] if "[goals]" in bench_log else ""
s["goal_table"] = [l for l in goals.splitlines() if l.startswith(("|", "# "))]
st = os.path.join(bdir, "streamtest.txt")
s["streamtest_tail"] = open(st, errors="replace").read().splitlines()[-6:] if os.path.exists(st) else None
try:
    ref = json.load(open(os.path.join(out, "torch_ref.json")))
    s["torch_ref"] = ref
    ratios = {}
    for c in ref["cases"]:
        if "op" in c or "ms" not in c:
            continue
        key = f"{c['B']}_{c['T']}_{c['E']}_{c['H']}_{c['dtype']}"
        # Like for like: PyTorch back to back ("ms") against BM_ForwardQueued (a device caller's
        # passes queued back to back), and synchronized per pass ("ms_synced") against BM_Forward
        # (each pass synchronized): ".../synced". BM_Forward stands in where Queued did not run.
        for suffix, ms, bench in (("", c["ms"], "BM_ForwardQueued"), ("/synced", c.get("ms_synced"), "BM_Forward")):
            if not ms:
                continue
            for graphs in (0, 1):
                if graphs and c["need_weights"]:
                    continue
                args = f"need_weights:{int(c['need_weights'])}/graphs:{graphs}/real_time"
                b = core.get(f"{key}/{bench}/{args}") or core.get(f"{key}/BM_Forward/{args}")
                if b and "passes/s" in b:
                    name = f"{key}/need_weights:{int(c['need_weights'])}{'/graphs' if graphs else ''}{suffix}"
                    ratios[name] = b["passes/s"] * ms / 1e3
    s["core_over_torch_speed"] = ratios
    for bench, name in (("BM_ForwardQueued", "big_bf16_no_weights_over_matmul"),
                        ("BM_Forward", "big_bf16_no_weights_over_matmul_synced")):
        big = core.get(f"4_4096_2048_16_bfloat16/{bench}/need_weights:0/graphs:0/real_time")
        if big and "GFLOP/s" in big:
            s[name] = big["GFLOP/s"] / 1e3 / ref["matmul_8192_bf16_tflops"]
except Exception as e:
    s["torch_ref_error"] = str(e)
try:
    paired = json.load(open(os.path.join(bdir, "paired.json")))
    s["paired"] = {f"{c['B']}_{c['T']}_{c['E']}_{c['H']}_{c['dtype']}": {
        "ratio": c["ratio"], "core_over_matmul": c["core_over_matmul"],
        "clocks": [r[side]["clocks"] for r in c["rounds"] for side in r["order"]]} for c in paired["cases"]}
except Exception as e:
    s["paired_error"] = str(e)
json.dump(s, open(os.path.join(out, "summary.json"), "w"), indent=1)
print(json.dumps({k: s[k] for k in ("cuda_support", "steps", "ctest")}, indent=1))
PY
rm -f "$results"; rm -rf "$bdir"
# Every file that comes back under 16 MiB: logs gzip -9; a log still too big keeps its first and
# last 20,000 lines.
for f in "$OUT"/*.log; do
  [ -f "$f" ] || continue
  gzip -9 -f "$f"
  if [ "$(stat -c %s "$f.gz")" -gt $((15 << 20)) ]; then
    { zcat "$f.gz" | head -20000; echo "... (cut: over 16 MiB compressed)"; zcat "$f.gz" | tail -20000; } |
      gzip -9 > "$f.cut.gz" && mv "$f.cut.gz" "$f.gz"
  fi
done
echo "gpu-check: done in $(( $(date +%s) - start ))s; files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
