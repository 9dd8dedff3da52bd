#!/usr/bin/env bash
# Container tier steps (ctest -L container; tests/container/CMakeLists.txt runs them in order):
#   tier.sh setup              own dockerd (dockerd.sh) + base images debian:12(-slim) (base_images.sh);
#                              a second setup waits for the first (a lock), then finds them
#   tier.sh build legacy|buildkit   docker build of ./Dockerfile with that builder
#   tier.sh build legacy --early    the same, started by scripts/test.sh beside the host build
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

# docker build of ./Dockerfile: log name $1 (in $build_log_dir, its tail shown on failure),
# builder $2 (0 legacy, 1 BuildKit), tag $3, more options after.
docker_build() {
  local log=$build_log_dir/$1.log bk=$2 tag=$3
  shift 3
  if ! DOCKER_BUILDKIT=$bk nice -n 19 $docker build "$@" -t "$tag" "$repo" >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    echo "container tier: docker build ($tag) failed; full log: $log" >&2
    exit 1
  fi
}

report_build() {  # tag, builder, how, start time
  local size
  size=$($docker image inspect -f '{{.Size}}' "$1")
  echo "container tier: built $1 with $2 ($3) in $(( $(date +%s) - $4 )) s," \
    "$((size / 1000000)) MB (log: $build_log_dir/build-$2.log)"
}

# The compiler cache of the image's build stage. The legacy build runs every instruction of the
# real Dockerfile, on mha-serve:ct-ccache-base (tests/container/ccache/Dockerfile: debian:12 plus
# ccache and the environment that makes scripts/build.sh compile through it); the cache goes in
# through the build context (.ct-ccache/, staged for the build's duration) and comes back from
# the build stage afterwards, kept in $MHA_DOCKER_ROOT/ccache for the next build. So a tier after
# a source change compiles only what changed; a compile that hits still reads every source and
# header it used, and the link, check_runtime_packages, the runtime stage and the smoke test run
# as ever. MHA_CONTAINER_CCACHE=0: plain debian:12, everything compiled.
ccache_dir=${MHA_DOCKER_ROOT:?}/ccache
staged=$repo/.ct-ccache

ccache_stats() {  # hits and misses of the cache in $1 ("" when there is no host ccache)
  command -v ccache >/dev/null || return 0
  CCACHE_DIR=$1 ccache --print-stats 2>/dev/null |
    awk '$1 ~ /^(direct_cache_hit|preprocessed_cache_hit)$/ {h += $2}
         $1 ~ /^cache_miss$/ {m += $2} END {print h + 0, m + 0}'
}

stage_ccache() {
  DOCKER_BUILDKIT=0 nice -n 19 $docker build -q -t mha-serve:ct-ccache-base "$here/ccache" \
    >"$build_log_dir/build-ccache-base.log" 2>&1 ||
    { cat "$build_log_dir/build-ccache-base.log" >&2; exit 1; }
  # A tier killed while the cache was staged left it in the context: it goes back first.
  if [ -d "$staged" ] && [ ! -d "$ccache_dir" ]; then mv "$staged" "$ccache_dir"; fi
  rm -rf "$staged"
  mkdir -p "$ccache_dir"
  # An empty cache (a new engine root, e.g. on a fresh machine) starts from the host's: the test
  # command has just compiled the same sources with the same compiler and flags (scripts/build.sh,
  # paths relative to the checkout), so the image's compiles are hits.
  local host
  host=$(ccache --get-config cache_dir 2>/dev/null || true)
  if [ -z "$(ls -A "$ccache_dir")" ] && [ -n "$host" ] && [ -d "$host" ]; then
    echo "container tier: seeding the image build's compiler cache from $host ($(du -sh "$host" | cut -f1))"
    cp -a "$host/." "$ccache_dir/"
  fi
  mv "$ccache_dir" "$staged"
  trap 'unstage_ccache' EXIT
}

unstage_ccache() {  # the cache as it went in goes back (a failed build keeps it)
  if [ -d "$staged" ]; then
    rm -rf "$ccache_dir"
    mv "$staged" "$ccache_dir"
  fi
}

# The build stage's cache replaces ours, less every entry this build neither hit nor wrote
# (ccache touches an entry on a hit): what went in was seeded from the host's whole cache (tests,
# benchmarks, other builds), and all of it would otherwise travel through every later build's
# context and back. $1: the build's start (epoch seconds).
harvest_ccache() {
  local before after start=${1:?build start}
  before=$(ccache_stats "$staged")
  rm -rf "$ccache_dir.new"
  mkdir -p "$ccache_dir.new"
  $docker run --rm --entrypoint tar mha-serve:ct-legacy-build -C /src/.ct-ccache -cf - . |
    tar -xf - -C "$ccache_dir.new"
  after=$(ccache_stats "$ccache_dir.new")
  rm -rf "$staged" "$ccache_dir"
  mv "$ccache_dir.new" "$ccache_dir"
  trap - EXIT
  if command -v ccache >/dev/null; then
    CCACHE_DIR=$ccache_dir ccache --evict-older-than "$(($(date +%s) - start + 60))s" >/dev/null
  fi
  if [ -n "$before" ] && [ -n "$after" ]; then
    read -r h0 m0 <<<"$before"
    read -r h1 m1 <<<"$after"
    echo "container tier: image build stage compiler cache: $((h1 - h0)) hits, $((m1 - m0))" \
      "misses ($(du -sh "$ccache_dir" | cut -f1) in $ccache_dir)"
  fi
}

# The Dockerfile's global ARGs and its stage named $1 alone, in build-container/ (git- and
# docker-ignored: sent with a build's context, never copied into an image): a classic build of it
# makes exactly the layers the whole Dockerfile's build finds in its cache for that stage.
stage_dockerfile() {
  local out=$repo/build-container/Dockerfile.$1
  mkdir -p "$repo/build-container"
  awk -v stage="$1" '
    /^FROM / {from = 1; in_stage = ($NF == stage && toupper($(NF - 1)) == "AS")}
    (!from && /^ARG /) || in_stage' "$repo/Dockerfile" >"$out"
  grep -q "^FROM .* AS $1\$" "$out" || { echo "container tier: no stage $1 in Dockerfile" >&2; exit 1; }
  echo "$out"
}

# The classic builder runs a Dockerfile's stages one after another. The runtime packages' stage
# (apt: 311 packages, ~75 s) needs nothing of the build stage, so it is built first, beside the
# build stage (apt, then the compile), from its own Dockerfile; the whole Dockerfile's build then
# finds both in its cache and runs the rest. Tags: mha-serve:ct-legacy (the image),
# mha-serve:ct-legacy-build and mha-serve:ct-runtime-packages (for the BuildKit build).
build_legacy() {
  local start how opts=() runtime_pid
  start=$(date +%s)
  how="from debian:12"
  docker_build build-legacy-runtime 0 mha-serve:ct-runtime-packages \
    -f "$(stage_dockerfile runtime-packages)" &
  runtime_pid=$!
  if [ "${MHA_CONTAINER_CCACHE:-1}" != 0 ]; then
    stage_ccache
    opts=(--build-arg DEBIAN_IMAGE=mha-serve:ct-ccache-base)
    how="from debian:12 + ccache"
  fi
  docker_build build-legacy-stage 0 mha-serve:ct-legacy-build "${opts[@]}" --target build
  wait "$runtime_pid" || exit 1
  docker_build build-legacy 0 mha-serve:ct-legacy "${opts[@]}"
  [ "${MHA_CONTAINER_CCACHE:-1}" = 0 ] || harvest_ccache "$start"
  $docker image prune -f >/dev/null  # the previous builds' layers, now untagged
  report_build mha-serve:ct-legacy legacy "$how" "$start"
}

# scripts/test.sh starts the legacy build early, once the host has built mha-server and mha-client
# (`build legacy --early`, MHA_CONTAINER_EARLY=<a folder of its own>): beside the rest of the host
# build and the tests. ctest's container.build_legacy then waits for it and reports its output and
# exit code; it builds itself when no early build ran (another ctest command, a killed one).
early_dir=${MHA_CONTAINER_EARLY:-}

build_legacy_early() {
  [ -n "$early_dir" ] || { echo "container tier: --early needs MHA_CONTAINER_EARLY" >&2; exit 2; }
  exec 8>"$early_dir/lock"
  flock 8
  touch "$early_dir/started"
  # The setup that scripts/test.sh started beside the build holds this lock until it is done.
  mkdir -p "$MHA_DOCKER_ROOT"
  (flock 9) 9>"$MHA_DOCKER_ROOT/setup.lock"
  local rc=0
  MHA_CONTAINER_EARLY='' "$here/tier.sh" build legacy >"$early_dir/out" 2>&1 || rc=$?
  echo "$rc" >"$early_dir/rc"
}

build_legacy_or_wait() {
  if [ -n "$early_dir" ] && [ -e "$early_dir/started" ]; then
    exec 8>"$early_dir/lock"
    flock 8
    if [ -f "$early_dir/rc" ]; then
      cat "$early_dir/out"
      echo "container tier: (this build started beside the host build: scripts/test.sh)"
      exit "$(cat "$early_dir/rc")"
    fi
  fi
  build_legacy
}

# check_scale_out.py's Prometheus image (tests/container/prometheus/Dockerfile) up to its package
# install, made here where the tier runs beside the host's tests: the scale-out check, which runs
# alone, then builds it from this cached layer and only copies its configuration in.
prometheus_packages() {
  local dir=$build_log_dir/prometheus-packages
  rm -rf "$dir"
  mkdir -p "$dir"
  sed '/^COPY /,$d' "$here/prometheus/Dockerfile" >"$dir/Dockerfile"
  DOCKER_BUILDKIT=0 nice -n 19 $docker build -t mha-serve:ct-prometheus-packages "$dir" \
    >"$build_log_dir/build-prometheus-packages.log" 2>&1 ||
    { tail -n 60 "$build_log_dir/build-prometheus-packages.log" >&2; exit 1; }
}

# BuildKit runs every instruction of the Dockerfile, but on the legacy build's stages when this
# tier has just made them: the build stage (its packages are installed and its objects up to
# date, COPY keeps the files' mtimes) and the runtime packages' stage (apt-get finds every
# package installed). So the second builder neither compiles everything again (~8 min on 2
# cores) nor unpacks the 311 runtime packages again (~75 s); what it checks is how BuildKit takes
# the Dockerfile (its stage graph, COPY --from, the smoke stage, the image's configuration). The
# from-scratch build is the legacy build's. MHA_CONTAINER_BUILDKIT_SCRATCH=1 builds from debian:12
# and debian:12-slim instead.
build_buildkit() {
  local start how="from debian:12" opts=(--progress=plain)
  start=$(date +%s)
  if [ "${MHA_CONTAINER_BUILDKIT_SCRATCH:-0}" != 1 ] &&
      $docker image inspect mha-serve:ct-legacy-build mha-serve:ct-runtime-packages \
        >/dev/null 2>&1; then
    opts+=(--build-arg DEBIAN_IMAGE=mha-serve:ct-legacy-build
      --build-arg RUNTIME_IMAGE=mha-serve:ct-runtime-packages)
    how="on the legacy build's build and runtime-packages stages"
  fi
  docker_build build-buildkit 1 mha-serve:ct-buildkit "${opts[@]}"
  report_build mha-serve:ct-buildkit buildkit "$how" "$start"
  prometheus_packages
}

step=${1:-}
case "$step" in
  setup)
    # One setup at a time: scripts/test.sh starts one beside the build (it downloads while the
    # compiler works); container.setup then waits for it and finds everything in place.
    mkdir -p "$MHA_DOCKER_ROOT"
    # The lock's descriptor is closed for dockerd, which outlives the setup: a daemon holding it
    # would hold the lock for good and the next setup would wait forever.
    exec 9>"$MHA_DOCKER_ROOT/setup.lock"
    flock 9
    "$here/dockerd.sh" start 9>&-
    nice -n 19 "$here/base_images.sh"
    ;;
  build)
    [ "${3:-}" = --early ] || require_engine
    builder=${2:?legacy or buildkit}
    case "$builder" in
      legacy) if [ "${3:-}" = --early ]; then build_legacy_early; else build_legacy_or_wait; fi ;;
      buildkit) build_buildkit ;;
      *) echo "unknown builder $builder" >&2; exit 2 ;;
    esac
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
