#!/usr/bin/env bash
# Installs the Debian 12 packages mha-serve needs, only those missing. Idempotent.
#   scripts/install-deps.sh build   # compiler, CMake, gRPC, LibTorch, ... (enough to build and serve)
#   scripts/install-deps.sh test    # build + what the test suite runs against (PyTorch, Prometheus,
#                                   # nginx, redis-server: the tests start their own on loopback)
#                                   # and ccache (scripts/build.sh compiles through it when present)
# Runs apt-get as root, or through sudo when not root.
set -euo pipefail

build_pkgs=(
  g++ cmake ninja-build pkg-config ca-certificates
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libtorch-dev libopenblas0-pthread libspdlog-dev prometheus-cpp-dev libcpp-httplib-dev
  libcli11-dev nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev
  libcairo2-dev libhiredis-dev lld
)
# lld: the linker of our binaries (MHA_LINKER in CMakeLists.txt).
# poppler-utils: pdftotext / pdfinfo read the PDFs of mha-client's pictures back in mha_plot_tests.
test_pkgs=(python3 python3-torch python3-grpcio python3-protobuf prometheus curl procps python3-yaml
  clang-format clang-tidy python3-jsonschema nginx python3-requests ccache poppler-utils
  redis-server)
# kubectl (kustomize) for tests/deploy, unless one is installed already: dpkg refuses a second
# owner of /usr/bin/kubectl.
command -v kubectl >/dev/null || test_pkgs+=(kubernetes-client)

mode=${1:-build}
case "$mode" in
  build) wanted=("${build_pkgs[@]}") ;;
  test) wanted=("${build_pkgs[@]}" "${test_pkgs[@]}") ;;
  *) echo "usage: $0 [build|test]" >&2; exit 2 ;;
esac

missing=()
for pkg in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#wanted[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "install-deps: missing ${missing[*]}; run as root or install sudo" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
