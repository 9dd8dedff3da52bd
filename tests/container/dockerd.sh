#!/usr/bin/env bash
# The container tier's own Docker engine, separate from any system dockerd:
#   tests/container/dockerd.sh start   # installs docker.io if missing, starts dockerd, waits
#   tests/container/dockerd.sh stop    # stops the dockerd this script started, by its PID
#   tests/container/dockerd.sh env     # prints DOCKER_HOST=... MHA_DOCKER_ROOT=... for the others
# Everything lives under MHA_DOCKER_ROOT (default ${XDG_CACHE_HOME:-/var/cache}/mha-serve-docker):
# data root (images and build caches, kept between runs so that warm builds are warm), exec root,
# socket and pidfile; tier.sh keeps the image build stage's compiler cache there too (ccache/). Exit 77 = skipped (Docker cannot start and MHA_SKIP_CONTAINER=1).
set -euo pipefail

root=${MHA_DOCKER_ROOT:-${XDG_CACHE_HOME:-/var/cache}/mha-serve-docker}
sock=$root/docker.sock
pidfile=$root/dockerd.pid
log=$root/dockerd.log
export DOCKER_HOST=unix://$sock

skip_or_fail() {
  echo "container tier: $*" >&2
  if [ "${MHA_SKIP_CONTAINER:-0}" = 1 ]; then
    echo "container tier: SKIPPED (MHA_SKIP_CONTAINER=1)" >&2
    exit 77
  fi
  echo "container tier: FAILED; set MHA_SKIP_CONTAINER=1 to skip this tier on machines without Docker" >&2
  exit 1
}

running() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

start() {
  if [ "${MHA_SKIP_CONTAINER:-0}" = 1 ] && ! command -v dockerd >/dev/null; then
    skip_or_fail "dockerd is not installed"
  fi
  if ! command -v dockerd >/dev/null || [ ! -x /usr/bin/docker ]; then
    [ "$(id -u)" -eq 0 ] || skip_or_fail "docker.io is missing and this is not root"
    echo "container tier: installing docker.io" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 \
      --no-install-recommends docker.io >&2 \
      || { DEBIAN_FRONTEND=noninteractive apt-get update -qq -o DPkg::Lock::Timeout=600 >&2 \
           && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 \
                --no-install-recommends docker.io >&2; } \
      || skip_or_fail "apt-get install docker.io failed"
  fi
  [ "$(id -u)" -eq 0 ] || skip_or_fail "dockerd needs root here"
  mkdir -p "$root/data" "$root/exec"
  if running; then
    echo "container tier: dockerd already running (pid $(cat "$pidfile"))" >&2
  else
    rm -f "$sock" "$pidfile"
    # setsid: not killed with the ctest process group; stopped by PID in `stop`. Niceness: image
    # builds and containers inherit dockerd's (a `nice docker build` would only nice the client),
    # set absolutely to MHA_DOCKER_NICE (default 0, whatever this script runs at: scripts/test.sh
    # starts the setup at 19 beside the build). The image build is the longest chain of the test
    # command, and at 19 it got the CPU only once the host's tests were done; MHA_DOCKER_NICE=19
    # makes the tier yield to other work on a shared machine.
    setsid nice -n $((${MHA_DOCKER_NICE:-0} - $(nice))) dockerd --host "unix://$sock" \
      --data-root "$root/data" --exec-root "$root/exec" --pidfile "$pidfile" >"$log" 2>&1 < /dev/null &
    for _ in $(seq 1 60); do
      [ -S "$sock" ] && /usr/bin/docker version >/dev/null 2>&1 && break
      sleep 0.5
    done
  fi
  if ! /usr/bin/docker version >/dev/null 2>&1; then
    tail -n 30 "$log" >&2 || true
    skip_or_fail "dockerd did not start (log: $log)"
  fi
  echo "container tier: dockerd pid $(cat "$pidfile"), DOCKER_HOST=$DOCKER_HOST" >&2
}

stop() {
  if ! running; then
    echo "container tier: no dockerd of ours running" >&2
    return 0
  fi
  pid=$(cat "$pidfile")
  kill -TERM "$pid"
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "container tier: dockerd $pid still up after 30 s, SIGKILL" >&2
    kill -KILL "$pid"
  fi
  echo "container tier: dockerd $pid stopped" >&2
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  env) echo "DOCKER_HOST=$DOCKER_HOST MHA_DOCKER_ROOT=$root" ;;
  *) echo "usage: $0 start|stop|env" >&2; exit 2 ;;
esac
