# Sourced by scripts/gpu-check.sh (the driver: its variables, and the functions of the files
# before this one, in file-name order): risks and the carried prefix (steps risks, unpack), the mtimes kept
# between calls, and the carried libraries' needs.
# ---- 1. Risks first (cheap, recorded even if everything after fails) ---------------------------
risks_step() {
  echo "## machine"; uname -a; nproc; free -g | head -2; cat /etc/os-release | head -4
  echo "## glibc here (Debian 12 libs need <= 2.36)"; ldd --version | head -1
  echo "## libstdc++ here: newest GLIBCXX / CXXABI (Debian 12 libs need <= GLIBCXX_3.4.30)"
  libstdcxx=$(ldconfig -p | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')
  echo "$libstdcxx"; strings "$libstdcxx" 2>/dev/null | grep -E '^GLIBCXX_[0-9.]+$' | sort -V | tail -1
  echo "## GPU"; nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1 | head -3
  echo "## nvcc"; command -v nvcc || ls -d /usr/local/cuda*/bin/nvcc 2>/dev/null; nvcc --version 2>&1 | tail -2
  echo "## cudart headers (CUDA shared memory, core/src/device/device_memory.cc; scripts/cuda-syntax-check.sh)"
  ls /usr/local/cuda*/include/cuda_runtime_api.h /usr/include/cuda_runtime_api.h 2>/dev/null | head -3
  scripts/cuda-syntax-check.sh 2>&1 | tail -2
  echo "## cmake / ninja / python"; cmake --version | head -1; ninja --version; python3 --version
  echo "## torch"
  python3 - <<'PY'
import torch, os
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
print("CXX11 ABI", torch._C._GLIBCXX_USE_CXX11_ABI, "(Debian 12 libs: new ABI = True needed)")
print("cmake_prefix_path", torch.utils.cmake_prefix_path)
print("lib dir", os.path.join(os.path.dirname(torch.__file__), "lib"))
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))
try:
    import grpc, google.protobuf, numpy
    print("grpcio", grpc.__version__, "protobuf", google.protobuf.__version__, "numpy", numpy.__version__)
except Exception as e:
    print("python deps:", e)
PY
  tlib=$(python3 -c 'import torch,os;print(os.path.join(os.path.dirname(torch.__file__),"lib"))' 2>/dev/null)
  echo "## protobuf symbols exported by LibTorch (clash risk with Debian's libprotobuf.so.32)"
  for so in "$tlib"/libtorch_cpu.so "$tlib"/libtorch.so "$tlib"/libc10.so; do
    [ -f "$so" ] || continue
    n=$(nm -D --defined-only "$so" 2>/dev/null | c++filt | grep -c 'google::protobuf' || true)
    echo "$(basename "$so"): $n exported google::protobuf symbols"
    nm -D --defined-only "$so" 2>/dev/null | c++filt | grep 'google::protobuf' | head -3
  done
  ldd "$tlib/libtorch_cpu.so" 2>/dev/null | grep -i 'protobuf\|not found' || echo "libtorch_cpu.so: no libprotobuf.so dependency"
  true
}

# ---- 2. Unpack the carried bundle --------------------------------------------------------------
unpack_step() {
  [ -f .device-deps/MANIFEST ] || { echo "no .device-deps/MANIFEST: carry .device-deps"; return 1; }
  # The same bundle as last time: keep the prefix (fresh files would make every object stale).
  if cmp -s .device-deps/MANIFEST "$prefix/.manifest"; then echo "prefix $prefix is current"; return 0; fi
  rm -rf "$prefix"
  scripts/device-deps.sh unpack .device-deps "$prefix" && cp .device-deps/MANIFEST "$prefix/.manifest"
}
# Source files -> sha1 and mtime after a build; before the next, files whose content is the same
# get their old mtime back (the device receives a fresh copy of the tree on every call).
source_files() { find . \( -path './build*' -o -path "./$build" -o -path ./.git -o -path ./.device-deps \) \
  -prune -o -type f -print; }
save_mtimes() { source_files | xargs -d '\n' stat -c '%Y %n' | while read -r t f; do
  echo "$t $(sha1sum "$f" | cut -c1-40) $f"; done > "$build/.gpu-check-mtimes"; }
restore_mtimes() {
  [ -f "$build/.gpu-check-mtimes" ] || return 0
  local t h f n=0
  while read -r t h f; do
    [ -f "$f" ] && [ "$(sha1sum "$f" | cut -c1-40)" = "$h" ] && touch -m -d "@$t" "$f" && n=$((n + 1))
  done < "$build/.gpu-check-mtimes"
  echo "gpu-check: $n unchanged sources keep the last build's mtimes"
}

export prefix build bdir
export -f risks_step unpack_step
step risks 40 "$risks" risks_step
step unpack 60 "$risks" unpack_step
# Python (torch, grpcio) keeps the device's own libraries: the carried libssl/libcurl/... are put
# on LD_LIBRARY_PATH for the C++ build and tests only.
orig_ld=${LD_LIBRARY_PATH-}
export MHA_ORIG_LD_LIBRARY_PATH=$orig_ld  # for the Python steps of scripts/gpu-profile.sh
[ -d "$prefix/usr" ] && eval "$(scripts/device-deps.sh env "$prefix")"
# The prefix's GLIBC needs, now that it exists (the first risk docs/gpu.md names).
{ echo "## carried libraries: newest GLIBC / GLIBCXX needed"
  objdump -T "$prefix"/usr/lib/x86_64-linux-gnu/*.so.* "$prefix"/usr/bin/* 2>/dev/null |
    grep -oE 'GLIBC_[0-9.]+|GLIBCXX_[0-9.]+|CXXABI_[0-9.]+' | sort -uV | awk -F_ '{v[$1]=$0} END {for (k in v) print v[k]}' 
  echo "## carried libraries/tools with unresolved deps here (libcurl's krb5/ldap chain is expected"
  echo "## and harmless: only CMake's FindCURL needs libcurl.so, nothing links prometheus-cpp::push)"
  for f in "$prefix"/usr/lib/x86_64-linux-gnu/*.so.* "$prefix"/usr/bin/*; do
    [ -L "$f" ] && continue
    m=$(ldd "$f" 2>/dev/null | grep 'not found' | awk '{print $1}' | tr '\n' ' ')
    [ -z "$m" ] || echo "$(basename "$f"): $m"
  done
  echo "## carried tools run here?"; protoc --version 2>&1; grpc_cpp_plugin --version 2>&1 | head -1
  "${PKG_CONFIG:-pkg-config}" --modversion cpp-httplib re2 2>&1; } >> "$risks" 2>&1
