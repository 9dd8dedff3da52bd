#!/usr/bin/env python3
"""Triton's CUDA shared-memory extension against a real mha-server on a GPU host (docs/shared-memory.md, item
6): run by scripts/gpu-check/27-cudashm.sh (step cudashm), by hand as

  python3 tests/service/cuda_shm_gpu.py --build build-cuda [--out rows_cudashm.json]

Needs PyTorch with CUDA (the device's python3) and nothing else: the calls go over REST (stdlib
http.client), so grpcio is not needed. A client's CUDA memory is a torch tensor; its IPC handle is
what `untyped_storage()._share_cuda_()` gives (the cudaIpcMemHandle_t of the allocator's segment
and the tensor's offset in it: the region covers the segment up to the tensor's end and requests
name the offset, as Triton's clients do). It checks, and exits 1 on the first failure:
  ServerMetadata lists cuda_shared_memory; register / status / unregister; the refusals that need
  a device (a handle of zeros, device_id out of range, registered twice, offset + byte size past
  the region, an input byte size not the tensor's, an output region too small);
  the answers: B=2,T=16 with query and output in CUDA shared memory == the in-band (JSON) answer,
  B=8,T=128 == the same through system shared memory (max abs err <= 1e-4);
then measures the goal row: B=8,T=128,E=512 fp32 through CUDA shared memory with --clients
processes (each its own region, output written device to device) against the core in-process
(mha-client local-bench --threads 1 on the same device): served / in-process >= 0.9.
"""
import argparse, base64, http.client, json, multiprocessing as mp, os, subprocess, sys, tempfile
import time
from multiprocessing import shared_memory

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
p.add_argument("--build", default=os.environ.get("MHA_BUILD_DIR", "build"))
p.add_argument("--device", default="cuda")
p.add_argument("--seconds", type=float, default=8.0, help="each side of the rate")
p.add_argument("--clients", type=int, default=4, help="processes calling at once (Python REST\n"
               "clients: ~1 ms of client time a call, so more than the CPU rows' 2)")
p.add_argument("--out", default=None, help="the row's JSON (summary.py's rows_*.json format)")
a = p.parse_args()
res = {"row": "cudashm", "device": a.device, "rows": []}
E, B, T = 512, 8, 128
# Expandable segments are not cudaMalloc blocks: their handles are not cudaIpcMemHandle_t.
_alloc = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
if "expandable_segments:True" in _alloc:
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = _alloc.replace("expandable_segments:True",
                                                           "expandable_segments:False")
CXX_ENV = dict(os.environ)
if "MHA_BENCH_LD_LIBRARY_PATH" in os.environ:  # the C++ programs get the carried libraries
    CXX_ENV["LD_LIBRARY_PATH"] = os.environ["MHA_BENCH_LD_LIBRARY_PATH"]


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        res.setdefault("errors", []).append(what)
        raise SystemExit(1)


class Rest:
    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def __call__(self, method, path, body=None):
        self.conn.request(method, path, body=None if body is None else json.dumps(body),
                          headers={"Content-Type": "application/json"})
        r = self.conn.getresponse()
        text = r.read()
        return r.status, (json.loads(text) if text else None)


def start_server(work):
    port, http_port, log = (os.path.join(work, n) for n in ("port", "http_port", "server.log"))
    proc = subprocess.Popen(
        [os.path.join(a.build, "server", "mha-server"), "--grpc-address", "127.0.0.1:0",
         "--port-file", port, "--http-address", "127.0.0.1:0", "--http-port-file", http_port,
         "--metrics-address", "", "--device", a.device, "--dtype", "float32",
         "--allow-client-shm=true", "--max-shm-bytes", str(1 << 30)],
        stdout=open(log, "w"), stderr=subprocess.STDOUT, env=CXX_ENV)
    deadline = time.monotonic() + 180
    while not (os.path.exists(http_port) and open(http_port).read().endswith("\n")):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            sys.exit("mha-server did not start: " + open(log, errors="replace").read()[-2000:])
        time.sleep(0.05)
    rest = Rest(int(open(http_port).read()))
    while True:
        try:
            if rest("GET", "/v2/health/ready")[0] == 200:
                return proc, int(open(http_port).read())
        except OSError:
            rest = Rest(int(open(http_port).read()))
        if time.monotonic() > deadline:
            proc.kill()
            sys.exit("mha-server never became ready")
        time.sleep(0.1)


def raw_ipc_handle(handle):
    """The cudaIpcMemHandle_t in PyTorch's storage handle: the 64 bytes themselves (older torch),
    or [version][b'c'][64 bytes] (c10's shareIpcHandle since the handles were versioned); an
    expandable segment's (b'e') is not a cudaIpcMemHandle_t."""
    if len(handle) == 64:
        return bytes(handle)
    if len(handle) >= 66 and handle[1] == ord("c"):
        return bytes(handle[2:66])
    res.setdefault("errors", []).append(f"storage handle of {len(handle)} bytes, type "
                                        f"{bytes(handle[1:2])!r}: not a cudaIpcMemHandle_t")
    raise SystemExit(1)


def share(t):
    """(raw handle bytes, offset of t in the handle's segment, the segment bytes up to t's end)."""
    info = t.untyped_storage()._share_cuda_()
    handle, offset = raw_ipc_handle(info[1]), info[3] + t.storage_offset() * t.element_size()
    return handle, offset, offset + t.numel() * t.element_size()


def register(rest, name, t, device=0):
    handle, offset, size = share(t)
    status, body = rest("POST", f"/v2/cudasharedmemory/region/{name}/register",
                        {"raw_handle": {"b64": base64.b64encode(handle).decode()},
                         "device_id": device, "byte_size": size})
    return status, body, offset


def infer(rest, shape, query=None, q_region=None, q_offset=0, o_region=None, o_offset=0,
          o_bytes=None):
    n = shape[0] * shape[1] * shape[2] * 4
    q = {"name": "query", "datatype": "FP32", "shape": shape}
    if q_region:
        q["parameters"] = {"shared_memory_region": q_region, "shared_memory_byte_size": n,
                           "shared_memory_offset": q_offset}
    else:
        q["data"] = query
    o = {"name": "output"}
    if o_region:
        o["parameters"] = {"shared_memory_region": o_region,
                           "shared_memory_byte_size": n if o_bytes is None else o_bytes,
                           "shared_memory_offset": o_offset}
    return rest("POST", "/v2/models/default/infer", {"inputs": [q], "outputs": [o]})


def worker(port, k, seconds, queue):
    """One client process: its own region (query then output), calls until `seconds` pass."""
    import torch
    torch.manual_seed(k)
    n = B * T * E
    buf = torch.empty(2 * n, device="cuda")
    buf[:n] = torch.randn(n, device="cuda")
    torch.cuda.synchronize()  # the server reads it on its own stream
    rest = Rest(port)
    status, body, off = register(rest, f"w{k}", buf)
    if status != 200:
        queue.put((k, 0, f"register: {status} {body}"))
        return
    call = lambda: infer(rest, [B, T, E], q_region=f"w{k}", q_offset=off, o_region=f"w{k}",
                         o_offset=off + 4 * n)
    for _ in range(5):
        call()
    count, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        status, body = call()
        if status != 200:
            queue.put((k, count, f"infer: {status} {body}"))
            return
        count += 1
    rest("POST", f"/v2/cudasharedmemory/region/w{k}/unregister")
    queue.put((k, count, None))


def refusal(result, *texts):
    status, body = result[0], result[1]
    error = (body or {}).get("error", "") if isinstance(body, dict) else str(body)
    return status != 200 and all(t in error for t in texts), f"{status} {error[:300]}"


def checks(rest, torch):
    status, meta = rest("GET", "/v2")
    check(status == 200 and "cuda_shared_memory" in meta.get("extensions", []),
          f"ServerMetadata lists cuda_shared_memory ({meta.get('extensions')})")
    n, ns = B * T * E, 2 * 16 * E
    buf = torch.zeros(2 * n, device="cuda")
    buf[:n] = torch.randn(n, device="cuda")
    torch.cuda.synchronize()
    status, body, off = register(rest, "c", buf)
    check(status == 200, f"CUDA region 'c' registered ({status} {body}; offset {off})")
    status, body = rest("GET", "/v2/cudasharedmemory/status")
    check(status == 200 and body == [{"name": "c", "device_id": 0, "byte_size": off + 8 * n}],
          f"status lists it: {body}")
    ok, got = refusal(register(rest, "c", buf), "region 'c' is registered already")
    check(ok, f"registered twice refused: {got}")
    zeros = base64.b64encode(bytes(64)).decode()
    ok, got = refusal(rest("POST", "/v2/cudasharedmemory/region/z/register",
                           {"raw_handle": {"b64": zeros}, "device_id": 0, "byte_size": 64}),
                      "cudaIpcOpenMemHandle")
    check(ok, f"a handle of zeros refused: {got}")
    handle = base64.b64encode(share(buf)[0]).decode()
    ok, got = refusal(rest("POST", "/v2/cudasharedmemory/region/far/register",
                           {"raw_handle": {"b64": handle}, "device_id": 99, "byte_size": 64}),
                      "device_id 99 is not in [0, ")
    check(ok, f"device_id out of range refused: {got}")
    past = infer(rest, [B, T, E], q_region="c", q_offset=off + 4 * n + 4, o_region="c",
                 o_offset=off)
    ok, got = refusal(past, "is past the end of region 'c'")
    check(ok, f"offset + byte size past the region refused: {got}")
    ok, got = refusal(infer(rest, [B, T, E], q_region="c", q_offset=off, o_region="c",
                            o_offset=off + 4 * n, o_bytes=16), "too small for the output's")
    check(ok, f"output region too small refused: {got}")
    # B=2,T=16: CUDA shared memory in and out == in-band.
    status, body = infer(rest, [2, 16, E], query=buf[:ns].cpu().tolist())
    check(status == 200, f"in-band B=2,T=16 ({status})")
    inband = torch.tensor(body["outputs"][0]["data"])
    status, body = infer(rest, [2, 16, E], q_region="c", q_offset=off, o_region="c",
                         o_offset=off + 4 * n)
    meta = body["outputs"][0] if status == 200 else {}
    check(status == 200 and "data" not in meta
          and meta.get("parameters", {}).get("shared_memory_region") == "c",
          f"CUDA shm B=2,T=16 answered with the region and no data ({status})")
    err = (buf[n:n + ns].cpu() - inband).abs().max().item()
    check(err <= 1e-4, f"CUDA shm output == in-band (max abs err {err:.2e})")
    return buf, off


def same_as_system_shm(rest, torch, buf, off):
    n = B * T * E
    sysm = shared_memory.SharedMemory(create=True, size=8 * n)
    try:
        torch.frombuffer(sysm.buf, dtype=torch.float32, count=n).copy_(buf[:n].cpu())
        status, body = rest("POST", "/v2/systemsharedmemory/region/sys/register",
                            {"key": "/" + sysm.name, "offset": 0, "byte_size": 8 * n})
        check(status == 200, f"system region registered ({status} {body})")
        status, _ = infer(rest, [B, T, E], q_region="sys", o_region="sys", o_offset=4 * n)
        status2, _ = infer(rest, [B, T, E], q_region="c", q_offset=off, o_region="c",
                           o_offset=off + 4 * n)
        check(status == 200 and status2 == 200, f"B=8,T=128 both ways ({status}, {status2})")
        system = torch.frombuffer(sysm.buf, dtype=torch.float32, count=n, offset=4 * n).clone()
        err = (buf[n:].cpu() - system).abs().max().item()
        check(err <= 1e-4, f"B=8,T=128: CUDA shm output == system shm output (err {err:.2e})")
        rest("POST", "/v2/systemsharedmemory/region/sys/unregister")
    finally:
        sysm.close()
        sysm.unlink()
    status, _ = rest("POST", "/v2/cudasharedmemory/region/c/unregister")
    status2, body = rest("GET", "/v2/cudasharedmemory/status")
    check(status == 200 and body == [], f"unregistered: status lists none ({body})")


def rates(port):
    ctx = mp.get_context("spawn")  # CUDA does not survive fork
    queue = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(port, k, a.seconds, queue))
             for k in range(a.clients)]
    for w in procs:
        w.start()
    got = [queue.get(timeout=a.seconds + 120) for _ in procs]
    for w in procs:
        w.join(30)
    errors = [e for _, _, e in got if e]
    check(not errors, f"{a.clients} clients through CUDA shm: {errors or 'no errors'}")
    served = sum(c for _, c, _ in got) / a.seconds
    client = os.path.join(a.build, "client", "mha-client")
    r = subprocess.run([client, "local-bench", "-b", str(B), "-t", str(T), "--device", a.device,
                        "--dtype", "float32", "--threads", "1", "-d", f"{a.seconds:g}", "--json"],
                       capture_output=True, text=True, env=CXX_ENV, timeout=a.seconds + 120)
    try:
        local = json.loads(r.stdout.strip().splitlines()[-1])["throughput_rps"]
    except (IndexError, KeyError, ValueError):
        check(False, f"local-bench: rc {r.returncode}: {(r.stderr or r.stdout)[-400:]}")
    ratio = served / local
    where = "GPU" if a.device != "cpu" else "CPU (a dry run)"
    res.update(served_rps=served, local_rps=local, ratio=ratio, clients=a.clients)
    res["rows"].append({
        "issue": "44", "goal": "≥ 0.9",
        "figure": f"{where}: CUDA shm, B=8,T=128,E=512 fp32, {a.clients} clients: served / "
                  "in-process req/s",
        "measured": f"{ratio:.2f} ({served:.0f} / {local:.0f} req/s; output written device to "
                    "device)"})
    print(f"cudashm: served {served:.1f} req/s, in-process {local:.1f} req/s, ratio {ratio:.2f}")


def main():
    import torch
    if not torch.cuda.is_available():
        res.setdefault("errors", []).append("no CUDA device seen by PyTorch")
        raise SystemExit(1)
    work = tempfile.mkdtemp(prefix="cudashm-")
    proc, port = start_server(work)
    try:
        rest = Rest(port)
        buf, off = checks(rest, torch)
        same_as_system_shm(rest, torch, buf, off)
        rates(port)
    finally:
        proc.terminate()
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = "killed"
        print(f"mha-server exit {code}")
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    try:
        main()
    except SystemExit as e:
        if e.code not in (0, None, 1):
            res.setdefault("errors", []).append(str(e.code))
        raise
    finally:
        if a.out:
            json.dump(res, open(a.out, "w"), indent=1)
    sys.exit(1 if res.get("errors") or not res["rows"] else 0)
