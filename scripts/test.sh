#!/usr/bin/env bash
# The whole test suite from a fresh Debian 12 checkout: install what is missing, build, run ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh test
scripts/build.sh
ctest --test-dir "${MHA_BUILD_DIR:-build}" --output-on-failure --timeout 600 "$@"
