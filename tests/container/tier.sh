#!/usr/bin/env bash
# Container tier steps (ctest -L container; tests/container/CMakeLists.txt runs them in order):
#   tier.sh setup              own dockerd (dockerd.sh) + base images debian:12(-slim) (base_images.sh)
#   tier.sh build legacy|buildkit   docker build of ./Dockerfile with that builder
#   tier.sh image IMAGE [--quick]   check_image.py        (needs MHA_CLIENT_BIN)
#   tier.sh scale-out IMAGE         check_scale_out.py    (needs MHA_CLIENT_BIN)
#   tier.sh teardown           stops the dockerd by PID
# Exit 77 = skipped: only when Docker cannot run here and MHA_SKIP_CONTAINER=1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
eval "export $("$here/dockerd.sh" env)"
# Debian's docker.io client: its `docker build` has BuildKit built in (DOCKER_BUILDKIT=1); a newer
# client elsewhere on PATH would want the buildx plugin, which Debian 12 does not package.
docker=/usr/bin/docker
export MHA_DOCKER_CLI=$docker
build_log_dir=${MHA_CONTAINER_LOG_DIR:-${TMPDIR:-/tmp}/mha-container-tier}
mkdir -p "$build_log_dir"

require_engine() {
  if ! $docker version >/dev/null 2>&1; then
    if [ "${MHA_SKIP_CONTAINER:-0}" = 1 ]; then
      echo "container tier: no Docker engine; SKIPPED (MHA_SKIP_CONTAINER=1)" >&2
      exit 77
    fi
    echo "container tier: FAILED: no Docker engine at $DOCKER_HOST (did container.setup fail?);" \
         "MHA_SKIP_CONTAINER=1 skips this tier" >&2
    exit 1
  fi
}

step=${1:-}
case "$step" in
  setup)
    "$here/dockerd.sh" start
    nice -n 19 "$here/base_images.sh"
    ;;
  build)
    require_engine
    builder=${2:?legacy or buildkit}
    case "$builder" in
      legacy) bk=0; opts=() ;;
      buildkit) bk=1; opts=(--progress=plain) ;;
      *) echo "unknown builder $builder" >&2; exit 2 ;;
    esac
    tag=mha-serve:ct-$builder
    log=$build_log_dir/build-$builder.log
    start=$(date +%s)
    how="from scratch"
    # BuildKit runs every instruction of the Dockerfile, but on the legacy build's build stage when
    # this tier has just made it: its packages are installed and its objects are up to date (COPY
    # keeps the files' mtimes), so the second builder does not compile everything again (~8 min
    # on 2 cores). The from-scratch compile is the legacy build's. MHA_CONTAINER_BUILDKIT_SCRATCH=1
    # builds from debian:12 instead.
    if [ "$builder" = buildkit ] && [ "${MHA_CONTAINER_BUILDKIT_SCRATCH:-0}" != 1 ] &&
        $docker image inspect mha-serve:ct-legacy >/dev/null 2>&1 &&
        DOCKER_BUILDKIT=0 $docker build --target build -t mha-serve:ct-legacy-build "$repo" \
          >"$build_log_dir/build-legacy-stage.log" 2>&1; then
      opts+=(--build-arg DEBIAN_IMAGE=mha-serve:ct-legacy-build)
      how="on the legacy build's build stage"
    fi
    if ! DOCKER_BUILDKIT=$bk nice -n 19 $docker build "${opts[@]}" -t "$tag" "$repo" \
        >"$log" 2>&1; then
      tail -n 60 "$log" >&2
      echo "container tier: docker build ($builder) failed; full log: $log" >&2
      exit 1
    fi
    secs=$(( $(date +%s) - start ))
    size=$($docker image inspect -f '{{.Size}}' "$tag")
    echo "container tier: built $tag with $builder ($how) in ${secs} s, $((size / 1000000)) MB" \
      "(log: $log)"
    ;;
  image)
    require_engine
    : "${MHA_CLIENT_BIN:?path of the host build of mha-client}"
    exec /usr/bin/python3 "$here/check_image.py" --image "${2:?image}" --client "$MHA_CLIENT_BIN" \
      --repo "$repo" "${@:3}"
    ;;
  scale-out)
    require_engine
    : "${MHA_CLIENT_BIN:?path of the host build of mha-client}"
    exec /usr/bin/python3 "$here/check_scale_out.py" --image "${2:?image}" \
      --client "$MHA_CLIENT_BIN" --repo "$repo"
    ;;
  teardown)
    "$here/dockerd.sh" stop
    ;;
  *) echo "usage: $0 setup|build legacy|build buildkit|image IMAGE|scale-out IMAGE|teardown" >&2
     exit 2 ;;
esac
