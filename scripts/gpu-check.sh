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
steps=${GPU_CHECK_STEPS:-risks unpack torchref configure build ctest streamtest corebench paired streambench servebench profile goals}
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
