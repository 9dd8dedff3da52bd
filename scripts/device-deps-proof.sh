#!/usr/bin/env bash
# Proof, without a GPU, that the carried bundle (scripts/device-deps.sh) is enough to build: a clean
# Debian 12 root (debootstrap minbase) gets only what the device has (compiler, CMake, ninja, a
# LibTorch, python3) -- none of the -dev packages the bundle carries -- then the bundle is unpacked
# into a prefix inside it and the CPU project is configured, built and partly tested against it.
#
#   scripts/device-deps-proof.sh [WORKDIR] [TARGETS...]
#     WORKDIR defaults to /tmp/mha-deps-proof (the root is WORKDIR/root, reused when present)
#     TARGETS default: mha_proto mha_core_tests mha_core_bench mha-server mha-test-server mha-client
#   A second run reuses the root, the unpacked prefix and build-proof; FRESH=1 starts over.
# Needs root, debootstrap and Debian 12's apt mirror (read from this host's apt sources at run
# time). Heavy steps run under nice -n 19 with ninja -j${JOBS:-2}. Logs: WORKDIR/*.log.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-/tmp/mha-deps-proof}; shift || true
targets=("$@"); [ ${#targets[@]} -gt 0 ] || targets=(mha_proto mha_core_tests mha_core_bench mha-server mha-test-server mha-client)
root=$work/root
jobs=${JOBS:-2}
mkdir -p "$work"
say() { echo "== proof: $*"; }

# 1. The clean root.
if [ ! -f "$root/.proof-base-done" ]; then
  mirror=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  [ -n "$mirror" ] || { echo "proof: no Debian mirror in this host's apt sources" >&2; exit 1; }
  if [ ! -x "$root/usr/bin/apt-get" ]; then
    say "debootstrap --variant=minbase bookworm $root $mirror"
    nice -n 19 debootstrap --variant=minbase bookworm "$root" "$mirror" > "$work/debootstrap.log" 2>&1
  fi
  say "installing the device stand-in: g++ cmake ninja-build libtorch-dev libopenblas0-pthread python3"
  chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive sh -c \
    'apt-get update -qq && nice -n 19 apt-get install -y -qq --no-install-recommends \
       g++ cmake ninja-build libtorch-dev libopenblas0-pthread python3' > "$work/chroot-apt.log" 2>&1
  # Debian's libtorch-dev drags in some of what the bundle carries (libprotobuf-dev, ...). The device's
  # pip LibTorch does not, so remove every carried package that is not needed at run time by
  # libtorch1.13 itself (its runtime libraries -- libprotobuf32, libfmt9 -- stay).
  carried=$("$repo/scripts/device-deps.sh" list)
  remove=()
  for p in $carried; do
    case "$p" in libprotobuf32|libfmt9|libssl3|libbrotli1|libcurl4) continue ;; esac
    chroot "$root" dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' && remove+=("$p")
  done
  if [ ${#remove[@]} -gt 0 ]; then
    say "removing from the root what the bundle must provide: ${remove[*]}"
    chroot "$root" dpkg --remove --force-depends "${remove[@]}" >> "$work/chroot-apt.log" 2>&1
  fi
  touch "$root/.proof-base-done"
fi
for tool in pkg-config pkgconf protoc grpc_cpp_plugin; do
  if chroot "$root" sh -c "command -v $tool" >/dev/null 2>&1; then
    echo "proof: the root has $tool outside the bundle; the proof would be weak" >&2; exit 1
  fi
done
for h in grpcpp/grpcpp.h google/protobuf/message.h spdlog/spdlog.h gtest/gtest.h httplib.h cairo/cairo.h; do
  [ ! -e "$root/usr/include/$h" ] || { echo "proof: the root has /usr/include/$h" >&2; exit 1; }
done

# 2. The bundle, here (Debian 12 host), and the repo's working tree (tracked + untracked, not ignored).
[ -f "$repo/.device-deps/MANIFEST" ] || "$repo/scripts/device-deps.sh" download "$repo/.device-deps"
src=$root/src/mha-serve
[ -z "${FRESH:-}" ] || rm -rf "$src"   # else keep build-proof (objects) and overwrite the sources
mkdir -p "$src"
(cd "$repo" && { git ls-files -co --exclude-standard; ls -1d .device-deps/*; } | tar -cf - -T -) | tar -xf - -C "$src"
say "bundle: $(du -sh "$repo/.device-deps" | cut -f1)"

# 3. Inside the root: unpack, configure, build, test.
cat > "$root/src/proof-inside.sh" <<EOF
set -uo pipefail
cd /src/mha-serve
if [ -n "${FRESH:-}" ] || [ ! -d /opt/mha-deps/usr ]; then
  rm -rf /opt/mha-deps build-proof
  scripts/device-deps.sh unpack .device-deps /opt/mha-deps || exit 10
fi
eval "\$(scripts/device-deps.sh env /opt/mha-deps)"
echo "== absolute /usr paths left in carried CMake/pkg-config files:"
grep -rlE '(^|[^_A-Za-z])/usr/(lib|include)' /opt/mha-deps/usr/lib/x86_64-linux-gnu/cmake /opt/mha-deps/usr/lib/cmake \
  /opt/mha-deps/usr/share/cmake /opt/mha-deps/usr/lib/x86_64-linux-gnu/pkgconfig /opt/mha-deps/usr/share/pkgconfig 2>/dev/null \
  | xargs -r grep -nE '(^|[^_A-Za-z"])/usr/(lib|include)' | grep -v '_realOrig\|/usr move\|lib -> /usr/lib' || echo none
protoc --version && grpc_cpp_plugin --version 2>/dev/null; echo "pkgconf: \$(\$PKG_CONFIG --cflags cpp-httplib re2)"
cmake -S . -B build-proof -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=/opt/mha-deps/usr || exit 11
for t in ${targets[*]}; do nice -n 19 ninja -C build-proof -j$jobs \$t || exit 12; done
cd build-proof
case " ${targets[*]} " in *" mha_core_tests "*) tests/unit/mha_core_tests --gtest_brief=1 || exit 13 ;; esac
[ ! -x bench/mha_core_bench ] || { bench/mha_core_bench --benchmark_min_time=0.01 --benchmark_filter='BM_Forward/' 2>&1 | tail -5; [ \${PIPESTATUS[0]} -eq 0 ] || exit 14; }
[ ! -x server/mha-server ] || server/mha-server --help | head -3
[ ! -x client/mha-client ] || client/mha-client --help | head -3
ldd server/mha-server 2>/dev/null | grep -E 'not found|mha-deps' | head -20
echo "== proof inside: OK"
EOF
say "configure + build (${targets[*]}) + tests inside the root; log: $work/inside.log"
# /proc inside the root: LibTorch's thread pool reads /proc/cpuinfo (at::set_num_threads aborts
# without it), as it does on the device.
mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
trap 'umount "$root/proc" 2>/dev/null || true' EXIT
set +e
chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  bash /src/proof-inside.sh > "$work/inside.log" 2>&1
rc=$?
set -e
tail -30 "$work/inside.log"
say "inside rc=$rc"
exit $rc
