#!/usr/bin/env bash
# The one command to run on the GPU device (docs/gpu.md): risks, build against the device's LibTorch
# and the carried prefix, the open issues' GPU rows, tests on CUDA, benchmarks. Every step records
# its result and the script goes on; what comes back is $OUT (at most 8 files, flat, each under
# 16 MiB): risks.log.gz, build.log.gz, ctest.log.gz, bench.log.gz, profile.log.gz (gzip -9),
# errors.txt (scripts/build_errors.py: the first failed edges in full, every undefined symbol
# demangled and deduplicated), summary.json (torch_ref.json folded in) and rows.md (the rows'
# table); the last three are the small text to commit (50-summary.sh says where).
# A step whose binaries did not build is recorded as needs-build, with one line naming them.
#
#   device call:  scripts/gpu-check.sh   (carry: [".device-deps"] only; never carry build-cuda: a
#                 carried path absent here is removed there, while ignored build outputs stay
#                 on a warm machine between calls)
#   env knobs:    OUT (default /tmp/gpu-check-out), GPU_CHECK_BUDGET (seconds, default 530),
#                 GPU_CHECK_STEPS (default below; the others: torchref, coretest (every
#                 mha_core_tests case, shorter than ctest's tiers), streamtest, corebench, paired,
#                 streambench, servebench, profile. A second call on the warm machine, e.g.
#                 GPU_CHECK_STEPS="buildrest ctest", reuses build-cuda: the carried prefix is
#                 unpacked again only when its MANIFEST changed, and sources whose content did not
#                 change get back the mtimes of the last build, so a fresh copy of the tree does
#                 not rebuild everything),
#                 JOBS (default nproc), MHA_DEPS_PREFIX (default /tmp/mha-deps), BUILD (build-cuda),
#                 SERVE_DEVICE / SERVE_DTYPE, GOALS_ROWS, GPU_ROWS_TINY: 25-rows.sh; CUDASHM_SECONDS:
#                 27-cudashm.sh
# The default steps in the order they run, and their time on an H100/H200 (16 cores): the build
# (the serving binaries and mha_llama_trace, ~240 s, cap 340), the rows estimated from their
# sizes (scripts/gpu-check/25-rows.sh says what each measures):
#   risks ~10 s, unpack ~15, configure ~30 (three torch imports included), build ~260,
#   goals (rows c32, decode64, batching) ~45, goalsblock (decode64 and batching again with
#   --device-wait block) ~35, llamaprofile (the Llama step's timeline) ~40       = ~435 s of 530;
#   then buildrest (every other target: tests, benches), streamtest (the CUDA cases of the core
#   and the device warm-up, alone) and ctest take what is left (a step's cap is cut to the time
#   left; under 15 s it is recorded no-time). The rows already measured (coldstart, longseq,
#   llamastep, cudashm: bench/results/gpu/) are steps by name: GPU_CHECK_STEPS="... coldstart ...".
#   A rerun on the warm machine goes on with the tests: GPU_CHECK_STEPS="buildrest streamtest
#   ctest" (~100 s + 30 + up to 180 s); a 15-minute device session has ~5 minutes left after the
#   first call (its start ~1.5 min), so give the rerun GPU_CHECK_BUDGET=240 and a timeout to match.
# Prepare here first: scripts/device-deps.sh download .device-deps   (Debian 12 host).
# The steps live in scripts/gpu-check/NN-*.sh, sourced here in order (they share this shell's
# variables and functions); summary.json is written by scripts/gpu-check/summary.py.
# Tests pick CUDA by themselves when at::hasCUDA() (tests/unit/core/model_test.cc runs cpu + cuda,
# tests/unit/core/device_stream_test.cc its DeviceStreamCudaTest cases: streams, pinned staging);
# servers started by the service tests get MHA_DEVICE=cuda (server flag --device's env name).
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
OUT=${OUT:-/tmp/gpu-check-out}; mkdir -p "$OUT"
budget=${GPU_CHECK_BUDGET:-530}
steps=${GPU_CHECK_STEPS:-risks unpack configure build goals goalsblock llamaprofile buildrest streamtest ctest}
jobs=${JOBS:-$(nproc)}
prefix=${MHA_DEPS_PREFIX:-/tmp/mha-deps}
build=${BUILD:-build-cuda}
bdir=$(mktemp -d)   # raw benchmark JSON, folded into summary.json
start=$(date +%s)
results=$OUT/.steps.tsv; : > "$results"   # removed at the end (summary.json carries it)
risks=$OUT/risks.log; : > "$risks"

for part in "$repo"/scripts/gpu-check/[0-9][0-9]-*.sh; do
  # shellcheck source=/dev/null
  source "$part"
done
