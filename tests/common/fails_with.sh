#!/usr/bin/env bash
# fails_with.sh CMD [ARGS...] -- PATTERN: passes when CMD exits non-zero AND its output (stdout +
# stderr) contains PATTERN (a fixed string). For refusals that must be both an error and precise.
set -uo pipefail
cmd=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do cmd+=("$1"); shift; done
[ $# -eq 2 ] || { echo "usage: $0 CMD [ARGS...] -- PATTERN" >&2; exit 2; }
pattern=$2
out=$("${cmd[@]}" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -eq 0 ]; then echo "fails_with: expected a non-zero exit, got 0" >&2; exit 1; fi
if ! grep -qF -- "$pattern" <<<"$out"; then
  echo "fails_with: exit $rc, but the output lacks: $pattern" >&2; exit 1
fi
echo "fails_with: exit $rc with: $pattern"
