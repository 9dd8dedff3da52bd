#!/usr/bin/env bash
# Every serving benchmark row in one command; see bench/run_all.py --help and docs/performance.md.
# Take numbers only on a quiet machine (the load average is printed with the table).
set -euo pipefail
cd "$(dirname "$0")/.."
exec /usr/bin/python3 bench/run_all.py "$@"
