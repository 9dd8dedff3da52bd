#!/usr/bin/env bash
# Carry the service's non-Torch build dependencies to a machine that has CUDA + LibTorch but no
# package registry (the GPU device). Debian 12 .deb files, unpacked into a private prefix there.
#
#   here (Debian 12):  scripts/device-deps.sh download .device-deps     # ~20 MB of .deb files
#   there:             scripts/device-deps.sh unpack .device-deps /tmp/mha-deps
#                      eval "$(scripts/device-deps.sh env /tmp/mha-deps)"
#                      cmake ... -DCMAKE_PREFIX_PATH="/tmp/mha-deps/usr;<LibTorch cmake dir>"
#   anywhere:          scripts/device-deps.sh list      # the packages carried
#                      scripts/device-deps.sh missing   # recursive deps NOT carried (for review)
#
# .device-deps/ is git-ignored; name it in the device call's `carry` list. Never unpack into /.
# What is carried and why:
#   * every -dev package the CMake build finds (gRPC, protobuf, absl, re2, c-ares, openssl, zlib,
#     spdlog, fmt, prometheus-cpp + civetweb + curl (its config finds CURL), cpp-httplib + brotli,
#     CLI11, nlohmann-json, cairo, gtest/gmock, benchmark) and their shared libraries;
#   * civetweb (the program): civetweb-targets.cmake imports bin/civetweb and CMake checks it exists;
#   * protoc + libprotoc and grpc_cpp_plugin / grpc_python_plugin (client/python/gen_stubs.sh);
#   * pkgconf: server/ finds cpp-httplib and gRPC's Findre2 finds re2 through pkg-config, which a
#     CUDA image need not have;
#   * nginx (the binary; its config comes from deploy/proxy): the proxy tests run MHA_NGINX.
# libcurl is carried for CMake alone (prometheus-cpp's config finds CURL; nothing links it):
# `unpack` moves its runtime library out of PREFIX's library folder, so that LD_LIBRARY_PATH
# (`env`) does not hand the device's own curl a libcurl without its libssh2/ldap dependencies.
# Not carried (the device's own must be used): glibc, libstdc++, the compiler and its headers
# (carrying libc6-dev would shadow the device's glibc headers through PREFIX/usr/include), and the
# common base libraries every Ubuntu/Debian image has (see `missing`).
# `unpack` makes the prefix relocatable: pkg-config files get prefix=PREFIX/usr, absolute
# symlinks are re-pointed inside PREFIX. The CMake config files Debian ships are relocatable
# already (they compute their prefix from their own location).
set -euo pipefail

pkgs=(
  # gRPC + protobuf (+ what gRPCConfig.cmake find_package()s: ZLIB Protobuf OpenSSL c-ares absl re2)
  libgrpc++-dev libgrpc-dev libgrpc++1.51 libgrpc29
  protobuf-compiler-grpc libprotobuf-dev libprotobuf32 libprotobuf-lite32 protobuf-compiler libprotoc32
  libabsl-dev libabsl20220623 libre2-dev libre2-9 libc-ares-dev libc-ares2
  libssl-dev libssl3 zlib1g-dev
  # logging, metrics, HTTP, CLI, JSON
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  prometheus-cpp-dev libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0
  libcivetweb-dev libcivetweb1 civetweb libcurl4-openssl-dev libcurl4
  libcpp-httplib-dev libcpp-httplib0.11 libbrotli-dev libbrotli1
  libcli11-dev nlohmann-json3-dev
  # mha-client's pictures (client/plot: cairo.h and libcairo, found without pkg-config) and the
  # libraries libcairo.so.2 loads (X11's client libraries among them; no X server is needed)
  libcairo2-dev libcairo2 libpixman-1-0 libfontconfig1 libfreetype6 libpng16-16 libexpat1
  libxcb1 libxcb-render0 libxcb-shm0 libxrender1 libx11-6 libx11-data libxext6 libxau6 libxdmcp6
  # the shared KV session store (--kv-store: hiredis) and the real redis-server its tests start
  libhiredis-dev libhiredis0.14 redis-server redis-tools liblzf1 libjemalloc2
  # tests and benchmarks
  libgtest-dev libgmock-dev googletest libbenchmark-dev libbenchmark1debian
  # pkg-config (pkgconf)
  pkgconf pkgconf-bin libpkgconf3
  # the service tier's real proxy (tests/service/proxy_affinity_test.cc runs $MHA_NGINX)
  nginx
)

usage() { sed -n '2,26p' "$0"; exit 2; }

case "${1:-}" in
  list) printf '%s\n' "${pkgs[@]}" ;;
  missing)
    apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
      --no-replaces --no-enhances "${pkgs[@]}" 2>/dev/null | grep -v '^[ <]' | sort -u |
      grep -vxF -f <(printf '%s\n' "${pkgs[@]}") || true ;;
  download)
    dir=${2:?usage: download DIR}
    command -v apt-get >/dev/null || { echo "device-deps: needs apt-get (Debian 12)" >&2; exit 1; }
    grep -q 'VERSION_CODENAME=bookworm' /etc/os-release ||
      echo "device-deps: warning: not Debian 12 (bookworm); package names are bookworm's" >&2
    mkdir -p "$dir"
    rm -f "$dir"/*.deb
    (cd "$dir" && apt-get download "${pkgs[@]}")
    # Fail loudly when a package is missing rather than on the device.
    for p in "${pkgs[@]}"; do
      ls "$dir/${p}_"*.deb >/dev/null 2>&1 || { echo "device-deps: $p not downloaded" >&2; exit 1; }
    done
    (cd "$dir" && ls -1 *.deb > MANIFEST)
    du -sh "$dir" ;;
  unpack)
    dir=${2:?usage: unpack DIR PREFIX}; prefix=${3:?usage: unpack DIR PREFIX}
    prefix=$(mkdir -p "$prefix" && cd "$prefix" && pwd)
    [ "$prefix" != / ] || { echo "device-deps: refusing to unpack into /" >&2; exit 1; }
    n=0
    for f in "$dir"/*.deb; do dpkg -x "$f" "$prefix"; n=$((n + 1)); done
    [ "$n" -gt 0 ] || { echo "device-deps: no .deb files in $dir" >&2; exit 1; }
    lib=$prefix/usr/lib/x86_64-linux-gnu
    if [ -f "$lib/libcurl.so.4" ] || [ -L "$lib/libcurl.so.4" ]; then  # CMake's only (see above)
      mkdir -p "$prefix/usr/lib/cmake-only"
      mv "$lib"/libcurl.so.4* "$prefix/usr/lib/cmake-only/"
      ln -sfn "$prefix/usr/lib/cmake-only/libcurl.so.4" "$lib/libcurl.so"
    fi
    # pkg-config files: prefix=/usr -> prefix=PREFIX/usr (and any other literal /usr/ paths).
    find "$prefix/usr" -name '*.pc' -path '*pkgconfig*' -print0 |
      xargs -0 -r sed -i -e "s|^prefix=/usr\$|prefix=$prefix/usr|" \
        -e "s|=/usr/|=$prefix/usr/|g" -e "s| -I/usr/| -I$prefix/usr/|g" -e "s| -L/usr/| -L$prefix/usr/|g"
    # Absolute symlinks (e.g. lib.so -> /lib/x86_64-linux-gnu/lib.so.N) re-pointed inside PREFIX
    # when the target was carried; otherwise left to the system (zlib1g-dev's libz.so: a device
    # without /lib/x86_64-linux-gnu/libz.so.1.2.13 gets the carried libz.a instead, which is fine).
    find "$prefix" -type l -lname '/*' -print0 | while IFS= read -r -d '' l; do
      t=$(readlink "$l")
      if [ -e "$prefix$t" ]; then ln -sfn "$prefix$t" "$l"; else echo "device-deps: $l -> $t (system)"; fi
    done
    echo "device-deps: unpacked $n packages into $prefix" ;;
  env)
    prefix=${2:?usage: env PREFIX}
    prefix=$(cd "$prefix" && pwd)
    lib=$prefix/usr/lib/x86_64-linux-gnu
    echo "export MHA_DEPS_PREFIX=$prefix"
    echo "export PATH=$prefix/usr/bin:\$PATH"
    # protoc / grpc_cpp_plugin and the test binaries need the carried shared libraries.
    echo "export LD_LIBRARY_PATH=$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
    echo "export PKG_CONFIG_PATH=$lib/pkgconfig:$prefix/usr/share/pkgconfig\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}"
    echo "export PKG_CONFIG=$prefix/usr/bin/pkgconf"
    # Debian's multiarch headers (openssl/opensslconf.h, curl/curlbuild.h): the compiler searches
    # /usr/include/x86_64-linux-gnu by itself, never PREFIX/usr/include/x86_64-linux-gnu.
    echo "export CPATH=$prefix/usr/include/x86_64-linux-gnu\${CPATH:+:\$CPATH}"
    echo "export GRPC_PYTHON_PLUGIN=$prefix/usr/bin/grpc_python_plugin" ;;
  *) usage ;;
esac
