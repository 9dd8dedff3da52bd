#!/usr/bin/python3
"""Triton's system shared-memory extension against a real mha-test-server, from Python: grpcio
with our inference/ stubs, multiprocessing.shared_memory for the regions, urllib for REST, as
Triton's protocol documentation (extension_shared_memory.md) describes the flow. Run by
run_shm_test.sh; exits 1 on the first failed check.

  --mode on   the server runs with --allow-client-shm=true, --max-shm-bytes 1048576 and a hold
              gate (--test-hold-dir): registration, every refusal, the fixture's exact results
              through gRPC and REST, in-band and shared-memory tensors in one request, unregister
              during a held request, and a client truncating its object during one.
  --mode off  the server runs without --allow-client-shm and with --admin-token-file: the token
              is checked first, then registration is refused.
"""
import argparse
import json
import os
import struct
import sys
import threading
import time
import urllib.error
import urllib.request
from multiprocessing import shared_memory

import grpc
from inference import grpc_service_pb2 as pb, grpc_service_pb2_grpc as pb_grpc
from shm_checks import check, refused  # tests/service/shm_checks.py

CUDA_BUILT = False  # set from ServerMetadata (test_registration)
MODEL = "format_safetensors"  # self-attention, E = 16, H = 4; its io.safetensors has the answers


def read_fixture(path):
    """name -> (shape, raw bytes) of a safetensors file (F32 tensors)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return {k: (v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in header.items() if k != "__metadata__"}


def max_err(raw, expected):
    a = struct.unpack(f"<{len(raw) // 4}f", raw)
    b = struct.unpack(f"<{len(expected) // 4}f", expected)
    return max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) else float("inf")


def shm_params(params, region, size, offset=None):
    params["shared_memory_region"].string_param = region
    params["shared_memory_byte_size"].int64_param = size
    if offset is not None:
        params["shared_memory_offset"].int64_param = offset


class Client:
    def __init__(self, args):
        self.stub = pb_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(args.target))
        self.http = args.http
        self.io = read_fixture(os.path.join(args.fixture, "io.safetensors"))
        self.query_shape, self.query = self.io["query"]
        self.out_bytes = len(self.io["output"][1])
        self.w_bytes = len(self.io["attn_weights"][1])

    def register(self, name, shm, offset=0, size=None, metadata=()):
        size = shm.size - offset if size is None else size
        return self.stub.SystemSharedMemoryRegister(pb.SystemSharedMemoryRegisterRequest(
            name=name, key="/" + shm.name, offset=offset, byte_size=size), metadata=metadata)

    def request(self, query_region=None, outputs=()):
        """ModelInfer with the fixture's query (in `query_region` or in-band), need_weights and
        per-head weights; `outputs`: (name, region or None, byte_size)."""
        r = pb.ModelInferRequest(model_name=MODEL)
        r.parameters["need_weights"].bool_param = True
        r.parameters["average_attn_weights"].bool_param = False
        q = r.inputs.add(name="query", datatype="FP32", shape=self.query_shape)
        if query_region:
            shm_params(q.parameters, query_region, len(self.query))
        else:
            r.raw_input_contents.append(self.query)
        for name, region, size in outputs:
            o = r.outputs.add(name=name)
            if region:
                shm_params(o.parameters, region, size)
        return r

    def rest(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.http + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as res:
                return res.status, json.loads(res.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")


def mapped(pid, shm):
    with open(f"/proc/{pid}/maps") as f:
        return ("/dev/shm/" + shm.name) in f.read()


def test_registration(c, inp, out, pid):
    meta = c.stub.ServerMetadata(pb.ServerMetadataRequest())
    check("system_shared_memory" in meta.extensions, "ServerMetadata lists system_shared_memory")
    global CUDA_BUILT
    CUDA_BUILT = "cuda_shared_memory" in meta.extensions  # a build with CUDA shared memory
    print(f"# ServerMetadata: cuda_shared_memory {'listed' if CUDA_BUILT else 'not listed'}")
    c.register("in", inp)
    c.register("out", out)
    status = c.stub.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest()).regions
    check(sorted(status) == ["in", "out"] and status["in"].key == "/" + inp.name
          and status["in"].byte_size == inp.size, "Status lists both regions with key and size")
    check(mapped(pid, inp), "the server maps the client's object")
    one = c.stub.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest(name="out")).regions
    check(list(one) == ["out"], "Status of one region")
    code = grpc.StatusCode
    refused(lambda: c.stub.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest(name="x")),
            code.NOT_FOUND, "'x' is not registered")
    refused(lambda: c.register("in", inp), code.ALREADY_EXISTS, "region 'in' is registered already")
    refused(lambda: c.stub.SystemSharedMemoryRegister(pb.SystemSharedMemoryRegisterRequest(
        name="k", key="/mha_shm_test_no_such_object", byte_size=8)), code.NOT_FOUND, "shm_open")
    refused(lambda: c.stub.SystemSharedMemoryRegister(pb.SystemSharedMemoryRegisterRequest(
        name="k", key="dev/shm/" + inp.name, byte_size=8)), code.INVALID_ARGUMENT,
        "is not a plain shared-memory name")
    refused(lambda: c.register("k", inp, offset=8, size=inp.size), code.INVALID_ARGUMENT,
            f"offset 8 + {inp.size} = {inp.size + 8} is past the end of", f"({inp.size} bytes)")
    refused(lambda: c.register("k", inp, offset=2**64 - 1, size=2), code.INVALID_ARGUMENT,
            "(overflows)")
    big = shared_memory.SharedMemory(create=True, size=2 << 20)
    try:
        refused(lambda: c.register("big", big), code.RESOURCE_EXHAUSTED, "--max-shm-bytes 1048576")
    finally:
        big.close()
        big.unlink()
    short = pb.CudaSharedMemoryRegisterRequest(name="g", raw_handle=b"\0" * 8, byte_size=8)
    refused(lambda: c.stub.CudaSharedMemoryRegister(short), code.INVALID_ARGUMENT,
            "CUDA region 'g': raw_handle is 8 bytes, a cudaIpcMemHandle_t is 64")
    refused(lambda: c.stub.CudaSharedMemoryRegister(pb.CudaSharedMemoryRegisterRequest(
        name="in", raw_handle=b"\0" * 64, byte_size=8)), code.ALREADY_EXISTS,
        "region 'in' is registered already as a system region")
    cuda = pb.CudaSharedMemoryRegisterRequest(name="g", raw_handle=b"\0" * 64, byte_size=8)
    if CUDA_BUILT:  # a handle of zeros is no allocation's (tests/gpu/cuda_shm_gpu.py: real ones)
        refused(lambda: c.stub.CudaSharedMemoryRegister(cuda), code.INVALID_ARGUMENT,
                "cudaIpcOpenMemHandle")
    else:
        refused(lambda: c.stub.CudaSharedMemoryRegister(cuda), code.FAILED_PRECONDITION,
                "CUDA region 'g': CUDA shared memory: this server was built without CUDA")
    check(len(c.stub.CudaSharedMemoryStatus(pb.CudaSharedMemoryStatusRequest()).regions) == 0,
          "CudaSharedMemoryStatus: no CUDA regions (the system ones are not listed)")
    refused(lambda: c.stub.CudaSharedMemoryStatus(pb.CudaSharedMemoryStatusRequest(name="in")),
            code.NOT_FOUND, "CUDA shared memory region 'in' is not registered")


def check_results(c, out, what, out_offset=0, w_offset=None):
    w_offset = c.out_bytes if w_offset is None else w_offset
    got = bytes(out.buf[out_offset:out_offset + c.out_bytes])
    weights = bytes(out.buf[w_offset:w_offset + c.w_bytes])
    err = max(max_err(got, c.io["output"][1]), max_err(weights, c.io["attn_weights"][1]))
    check(err <= 1e-5, f"{what}: output and attn_weights from the region == PyTorch (err {err:.2e})")


def test_inference(c, inp, out):
    inp.buf[:len(c.query)] = c.query
    out.buf[:] = b"\xff" * out.size
    r = c.request("in", [("output", "out", c.out_bytes), ("attn_weights", None, 0)])
    # attn_weights into the same region after output: a second region view by offset.
    shm_params(r.outputs[1].parameters, "out", c.w_bytes, c.out_bytes)
    response = c.stub.ModelInfer(r)
    check([len(x) for x in response.raw_output_contents] == [0, 0],
          "gRPC: outputs in shared memory carry no bytes")
    o = response.outputs[0]
    check(o.parameters["shared_memory_region"].string_param == "out"
          and o.parameters["shared_memory_byte_size"].int64_param == c.out_bytes
          and list(o.shape) == c.io["output"][0] and o.datatype == "FP32",
          "gRPC: the output's metadata and shared-memory parameters")
    check_results(c, out, "gRPC")
    # Mixed: query from the region, attn_weights in-band, output into the region.
    out.buf[:] = b"\xff" * out.size
    r = c.request("in", [("output", "out", c.out_bytes), ("attn_weights", None, 0)])
    response = c.stub.ModelInfer(r)
    check(len(response.raw_output_contents[1]) == c.w_bytes, "mixed: attn_weights in-band")
    err = max_err(response.raw_output_contents[1], c.io["attn_weights"][1])
    check(err <= 1e-5, f"mixed: in-band attn_weights == PyTorch (err {err:.2e})")
    err = max_err(bytes(out.buf[:c.out_bytes]), c.io["output"][1])
    check(err <= 1e-5, f"mixed: output in the region == PyTorch (err {err:.2e})")
    # ModelStreamInfer: the same request, answered on the stream.
    out.buf[:] = b"\xff" * out.size
    stream = [c.request("in", [("output", "out", c.out_bytes)])]
    answers = list(c.stub.ModelStreamInfer(iter(stream)))
    check(len(answers) == 1 and not answers[0].error_message, "stream: answered without error")
    err = max_err(bytes(out.buf[:c.out_bytes]), c.io["output"][1])
    check(err <= 1e-5, f"stream: output in the region == PyTorch (err {err:.2e})")
    # Mixed inputs: query in-band, the rest as before.
    out.buf[:] = b"\xff" * out.size
    r = c.request(None, [("output", "out", c.out_bytes)])
    c.stub.ModelInfer(r)
    err = max_err(bytes(out.buf[:c.out_bytes]), c.io["output"][1])
    check(err <= 1e-5, f"in-band query, output in the region == PyTorch (err {err:.2e})")


def test_inference_refusals(c):
    code = grpc.StatusCode
    n = len(c.query)
    r = c.request("nope", [("output", None, 0)])
    refused(lambda: c.stub.ModelInfer(r), code.NOT_FOUND, "query: shared memory region 'nope' is "
            "not registered")
    r = c.request("in")
    r.inputs[0].parameters["shared_memory_byte_size"].int64_param = n - 4
    refused(lambda: c.stub.ModelInfer(r), code.INVALID_ARGUMENT,
            f"shared_memory_byte_size {n - 4} (region 'in') is not the tensor's")
    r = c.request("in")
    r.inputs[0].parameters["shared_memory_offset"].int64_param = 4000
    refused(lambda: c.stub.ModelInfer(r), code.INVALID_ARGUMENT,
            f"4000 + {n} = {4000 + n} is past the end of region 'in' (4096 bytes)")
    r = c.request("in")
    del r.inputs[0].parameters["shared_memory_byte_size"]
    refused(lambda: c.stub.ModelInfer(r), code.INVALID_ARGUMENT,
            "shared_memory_region 'in' without shared_memory_byte_size")
    r = c.request("in")
    del r.inputs[0].parameters["shared_memory_region"]
    refused(lambda: c.stub.ModelInfer(r), code.INVALID_ARGUMENT,
            "shared_memory_byte_size without shared_memory_region")
    r = c.request("in")
    r.inputs[0].contents.fp32_contents.extend([0.0] * (n // 4))
    refused(lambda: c.stub.ModelInfer(r), code.INVALID_ARGUMENT,
            "contents must not be set when the tensor is in shared memory region 'in'")
    r = c.request("in", [("output", "out", 16)])
    refused(lambda: c.stub.ModelInfer(r), code.INVALID_ARGUMENT,
            "output: shared_memory_byte_size 16 (region 'out') is too small for the output's "
            f"{c.out_bytes} bytes")
    response = c.stub.ModelInfer(c.request(None, [("output", None, 0)]))
    err = max_err(response.raw_output_contents[0], c.io["output"][1])
    check(err <= 1e-5, "the server is unharmed: an in-band request still answers right")


def test_rest(c, inp, out):
    status, body = c.rest("GET", "/v2/systemsharedmemory/status")
    check(status == 200 and sorted(r["name"] for r in body) == ["in", "out"],
          "REST: status lists the regions")
    status, _ = c.rest("POST", "/v2/systemsharedmemory/region/rest_in/register",
                       {"key": "/" + inp.name, "offset": 0, "byte_size": inp.size})
    check(status == 200, "REST: register")
    status, body = c.rest("POST", "/v2/systemsharedmemory/region/rest_in/register",
                          {"key": "/" + inp.name, "offset": 0, "byte_size": inp.size})
    check(status == 409 or (status >= 400 and "registered already" in body["error"]),
          f"REST: register twice refused ({status} {body})")
    out.buf[:] = b"\xff" * out.size
    shm = lambda region, size, offset=0: {"shared_memory_region": region,  # noqa: E731
                                          "shared_memory_byte_size": size,
                                          "shared_memory_offset": offset}
    request = {"parameters": {"need_weights": True, "average_attn_weights": False},
               "inputs": [{"name": "query", "datatype": "FP32", "shape": c.query_shape,
                           "parameters": shm("rest_in", len(c.query))}],
               "outputs": [{"name": "output", "parameters": shm("out", c.out_bytes)},
                           {"name": "attn_weights",
                            "parameters": shm("out", c.w_bytes, c.out_bytes)}]}
    status, body = c.rest("POST", f"/v2/models/{MODEL}/infer", request)
    check(status == 200 and all("data" not in o for o in body["outputs"])
          and body["outputs"][0]["parameters"]["shared_memory_region"] == "out",
          f"REST: outputs in shared memory carry no data ({status})")
    check_results(c, out, "REST")
    request["inputs"][0]["data"] = [0.0] * (len(c.query) // 4)
    status, body = c.rest("POST", f"/v2/models/{MODEL}/infer", request)
    check(status == 400 and "shared_memory_region on the same tensor" in body["error"],
          "REST: data and a region on one tensor refused")
    status, _ = c.rest("POST", "/v2/systemsharedmemory/region/rest_in/unregister")
    status2, body = c.rest("GET", "/v2/systemsharedmemory/region/rest_in/status")
    check(status == 200 and status2 == 404, "REST: unregister, then status of it is 404")
    status, body = c.rest("POST", "/v2/cudasharedmemory/region/g/register",
                          {"raw_handle": {"b64": "AAAA"}, "device_id": 0, "byte_size": 8})
    check(status == 400 and "raw_handle is 3 bytes" in body["error"],
          "REST: a CUDA handle that is not 64 bytes refused")
    zeros = "A" * 86 + "=="  # base64 of 64 zero bytes
    status, body = c.rest("POST", "/v2/cudasharedmemory/region/g/register",
                          {"raw_handle": {"b64": zeros}, "device_id": 0, "byte_size": 8})
    expected = "cudaIpcOpenMemHandle" if CUDA_BUILT else "built without CUDA"
    check(status == 400 and expected in body["error"], f"REST: CUDA refused ({expected})")
    status, body = c.rest("GET", "/v2/cudasharedmemory/status")
    check(status == 200 and body == [], "REST: no CUDA regions listed")


def entered(hold_dir):
    return len([f for f in os.listdir(hold_dir) if f.startswith("entered.")])


def wait_entered(hold_dir, k):
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(hold_dir, f"entered.{k}")):
        check(time.monotonic() < deadline, f"pass {k} reaches the hold gate")
        time.sleep(0.002)


def test_unregister_during_held_request(c, inp, out, hold_dir, pid):
    out.buf[:] = b"\xff" * out.size
    k = entered(hold_dir) + 1
    open(os.path.join(hold_dir, "hold"), "w").close()
    try:
        infer = c.stub.ModelInfer.future(c.request("in", [("output", "out", c.out_bytes)]))
        wait_entered(hold_dir, k)
        unregister = c.stub.SystemSharedMemoryUnregister.future(
            pb.SystemSharedMemoryUnregisterRequest(name="in"))
        time.sleep(0.5)  # it must still wait: a request holds the region (it cannot pass early)
        check(not unregister.done(), "Unregister waits while a held request uses the region")
        check(mapped(pid, inp), "the region stays mapped meanwhile")
    finally:
        os.remove(os.path.join(hold_dir, "hold"))
    infer.result(timeout=60)
    unregister.result(timeout=60)
    err = max_err(bytes(out.buf[:c.out_bytes]), c.io["output"][1])
    check(err <= 1e-5, f"the held request answered right (err {err:.2e}), then Unregister")
    check(not mapped(pid, inp), "the region is unmapped after Unregister")
    refused(lambda: c.stub.ModelInfer(c.request("in")), grpc.StatusCode.NOT_FOUND,
            "'in' is not registered")


def test_truncated_during_held_request(c, hold_dir):
    victim = shared_memory.SharedMemory(create=True, size=1 << 16)
    try:
        victim.buf[:len(c.query)] = c.query
        c.register("victim", victim)
        k = entered(hold_dir) + 1
        open(os.path.join(hold_dir, "hold"), "w").close()
        try:
            infer = c.stub.ModelInfer.future(c.request("victim", [("output", None, 0)]))
            wait_entered(hold_dir, k)
            os.truncate("/dev/shm/" + victim.name, 0)  # the client shrinks it under the server
        finally:
            os.remove(os.path.join(hold_dir, "hold"))
        refused(lambda: infer.result(timeout=60), grpc.StatusCode.INVALID_ARGUMENT,
                "shared memory region 'victim'", "truncated while registered")
        refused(lambda: c.stub.ModelInfer(c.request("victim")), grpc.StatusCode.INVALID_ARGUMENT,
                "'victim'", "truncated while registered")
        c.stub.SystemSharedMemoryUnregister(pb.SystemSharedMemoryUnregisterRequest(name="victim"))
        response = c.stub.ModelInfer(c.request(None, [("output", None, 0)]))
        err = max_err(response.raw_output_contents[0], c.io["output"][1])
        check(err <= 1e-5, "the server survived the truncation and still answers right")
    finally:
        victim.close()
        victim.unlink()


def run_off(c, args):
    code = grpc.StatusCode
    inp = shared_memory.SharedMemory(create=True, size=4096)
    try:
        refused(lambda: c.register("in", inp), code.UNAUTHENTICATED, "")
        token = open(args.token_file).read().strip()
        auth = (("authorization", "Bearer " + token),)
        refused(lambda: c.register("in", inp, metadata=auth), code.FAILED_PRECONDITION,
                "--allow-client-shm=true")
        cuda = pb.CudaSharedMemoryRegisterRequest(name="g", raw_handle=b"\0" * 64, byte_size=8)
        refused(lambda: c.stub.CudaSharedMemoryRegister(cuda), code.UNAUTHENTICATED, "")
        refused(lambda: c.stub.CudaSharedMemoryRegister(cuda, metadata=auth),
                code.FAILED_PRECONDITION, "--allow-client-shm=true")
        status, _ = c.rest("POST", "/v2/systemsharedmemory/region/in/register",
                           {"key": "/" + inp.name, "byte_size": 4096})
        check(status == 401, f"REST register without the token: 401 ({status})")
    finally:
        inp.close()
        inp.unlink()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--target", required=True)
    p.add_argument("--http", required=True)
    p.add_argument("--fixture", required=True)
    p.add_argument("--mode", choices=["on", "off"], required=True)
    p.add_argument("--hold-dir")
    p.add_argument("--server-pid", type=int)
    p.add_argument("--token-file")
    args = p.parse_args()
    c = Client(args)
    if args.mode == "off":
        run_off(c, args)
        return 0
    inp = shared_memory.SharedMemory(create=True, size=4096)
    out = shared_memory.SharedMemory(create=True, size=4096)
    try:
        test_registration(c, inp, out, args.server_pid)
        test_inference(c, inp, out)
        test_inference_refusals(c)
        test_rest(c, inp, out)
        test_unregister_during_held_request(c, inp, out, args.hold_dir, args.server_pid)
        test_truncated_during_held_request(c, args.hold_dir)
        c.stub.SystemSharedMemoryUnregister(pb.SystemSharedMemoryUnregisterRequest())
        regions = c.stub.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest()).regions
        check(len(regions) == 0 and not mapped(args.server_pid, out), "Unregister all")
    finally:
        for s in (inp, out):
            s.close()
            s.unlink()
    print("all shared-memory checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
