#!/usr/bin/env bash
# Quick start: install what is missing, build, and start mha-server on its embedded default model
# (E=512, H=8; no file needed). Arguments go to mha-server (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh build
MHA_TARGETS=mha-server scripts/build.sh
exec "${MHA_BUILD_DIR:-build}/server/mha-server" "$@"
