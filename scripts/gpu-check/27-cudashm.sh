# Sourced by scripts/gpu-check.sh (the driver: its variables, and the functions of the files
# before this one, in file-name order): the CUDA shared-memory row (docs/shared-memory.md), after the other rows and before
# the tests (step cudashm). tests/service/cuda_shm_gpu.py starts its own mha-server on loopback
# (--device cuda, --allow-client-shm=true), checks Triton's CUDA shared-memory extension with real
# IPC handles from PyTorch (register / status / unregister, the refusals that need a device, the
# answers against in-band and system shared memory), then measures B=8,T=128,E=512 fp32 through
# CUDA shared memory, 4 client processes, against mha-client local-bench on the same device
# (goal: served / in-process >= 0.9). Its JSON: $bdir/rows_cudashm.json, folded into summary.json
# and rows.md like 25-rows.sh's. Over REST (stdlib http.client): grpcio is not needed.
#   cudashm   ~35 s (server start ~10, checks ~5, 8 s served + 8 s in-process, process starts),
#             cap 75; CUDASHM_SECONDS (default 8) per side.
# A build with -DMHA_CUDA_SHM=OFF (20-build.sh's fallback) fails its first check (ServerMetadata
# lists no cuda_shared_memory), which says so in the row.
cudashm() {
  [ -n "$rows_py" ] || { echo "cudashm: no python3"; return 2; }
  env LD_LIBRARY_PATH="$MHA_ORIG_LD_LIBRARY_PATH" MHA_BENCH_LD_LIBRARY_PATH="${LD_LIBRARY_PATH-}" \
    "$rows_py" tests/service/cuda_shm_gpu.py --build "$build" --device "${SERVE_DEVICE:-cuda}" \
    --seconds "${CUDASHM_SECONDS:-8}" --out "$bdir/rows_cudashm.json"
}
export -f cudashm
built cudashm server/mha-server client/mha-client && step cudashm 75 "$OUT/bench.log" cudashm
