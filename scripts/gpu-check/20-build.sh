# Sourced by scripts/gpu-check.sh (the driver: its variables, and the functions of the files
# before this one, in file-name order): PyTorch's own numbers (step torchref), then configure and
# build the serving binaries (steps configure, build; configure-nographs, build-nographs when the
# CUDA graphs or the CUDA shared-memory unit fails).
# ---- 2b. PyTorch's own numbers first: they need no build (a call whose build fails keeps them).
step torchref 110 "$OUT/bench.log" env LD_LIBRARY_PATH="$orig_ld" python3 bench/torch_gpu_reference.py --out "$OUT/torch_ref.json"
# ---- 3. Configure + build ----------------------------------------------------------------------
torch_cmake=$(LD_LIBRARY_PATH="$orig_ld" python3 -c 'import torch;print(torch.utils.cmake_prefix_path)' 2>/dev/null)
nvcc_bin=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
cap=$(LD_LIBRARY_PATH="$orig_ld" python3 -c 'import torch;m,n=torch.cuda.get_device_capability(0);print(f"{m}.{n}")' 2>/dev/null || echo 9.0)
cuda_args=()
[ -z "$nvcc_bin" ] || cuda_args+=("-DCMAKE_CUDA_COMPILER=$nvcc_bin" "-DCUDAToolkit_ROOT=$(dirname "$(dirname "$nvcc_bin")")")
blog=$OUT/build.log; : > "$blog"
restore_mtimes
step configure 120 "$blog" cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix/usr;$torch_cmake" -DTORCH_CUDA_ARCH_LIST="$cap" "${cuda_args[@]}"
if grep -q 'CUDA support: ON' "$blog"; then cuda_on=true; else cuda_on=false; fi
echo "gpu-check: CUDA support: $cuda_on"
# -k 0: one call shows every compile error, not only the first. Step build makes the serving
# binaries the rows and llamaprofile need (25-rows.sh runs them next); step buildrest (30-tests.sh) every other
# target, after the rows.
serve_targets=(server/mha-server client/mha-client bench/mha_echo_floor bench/mha_llama_trace)
step build 340 "$blog" nice ninja -C "$build" -j"$jobs" -k 0 "${serve_targets[@]}"
python3 scripts/build_errors.py "$blog" > "$OUT/errors.txt" 2>&1
# CUDA graphs (LibTorch's CUDA API) and CUDA shared memory (cudart's IPC calls, core/src/
# device_memory.cc) are the units written for CUDA without a CUDA machine to compile them on: if
# one of them is what failed, build on without it (eager passes only; CUDA shared memory refused
# with FAILED_PRECONDITION). Steps configure-nographs / build-nographs, whichever unit it was.
cuda_off=()
if grep -q 'cuda_graphs\.cc' "$OUT/errors.txt" && grep -q 'MHA_CUDA_GRAPHS:BOOL=ON' "$build/CMakeCache.txt"; then
  cuda_off+=(-DMHA_CUDA_GRAPHS=OFF)
fi
if grep -q 'device_memory\.cc' "$OUT/errors.txt" && grep -q 'MHA_CUDA_SHM:BOOL=ON' "$build/CMakeCache.txt"; then
  cuda_off+=(-DMHA_CUDA_SHM=OFF)
fi
if [ ${#cuda_off[@]} -gt 0 ]; then
  echo "gpu-check: a CUDA unit failed: building with ${cuda_off[*]}"
  mv "$OUT/errors.txt" "$bdir/errors-graphs.txt"
  echo "the build before ${cuda_off[*]}" > "$bdir/errors-graphs.what"
  steps="$steps configure-nographs build-nographs"
  step configure-nographs 60 "$blog" cmake -S . -B "$build" "${cuda_off[@]}"
  step build-nographs 200 "$blog" nice ninja -C "$build" -j"$jobs" -k 0 "${serve_targets[@]}"
  { python3 scripts/build_errors.py "$blog"; echo; echo "## $(cat "$bdir/errors-graphs.what")"
    cat "$bdir/errors-graphs.txt"; } > "$OUT/errors.txt" 2>&1
fi
[ -f "$build/build.ninja" ] && save_mtimes
