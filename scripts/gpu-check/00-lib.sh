# Sourced by scripts/gpu-check.sh (the driver: its variables, and the functions of the files
# before this one, in file-name order): the step runner. remaining: seconds left of the budget; built: the
# binaries a step needs exist; step: runs one step under a cap and records it.
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
