#!/usr/bin/python3
"""mha.v1 tensors in shared memory against a real mha-test-server (docs/shared-memory.md): the
regions are registered through the Open Inference Protocol's SystemSharedMemoryRegister (one
registry per server), then mha.v1's Forward, ForwardStream and LayerSteps name them in
Tensor.shared_memory (inputs) and output_shared_memory / attn_weights_shared_memory (outputs).
Run by run_shm_test.sh on the server of shm_test.py's "on" checks; exits 1 on the first failed
check.

Checks: the fixture's output and per-head attn_weights equal PyTorch's (max abs err <= 1e-5)
with the query in a region and both outputs written into one, through Forward and
ForwardStream; in-band and shared-memory tensors mixed in one request; every refusal with its
code and message (the Open Inference Protocol's rules and words, mha.v1's field names); and a
Llama stack's LayerSteps with every entry's hidden states and outputs in shared memory equal,
bit for bit, to the same steps in-band, and to PyTorch's (the fixture); and Unregister during a
Forward held in the core (the server's hold gate): the names go at once, the answer waits for the
request, which is answered right.
"""
import argparse
import json
import os
import queue
import struct
import sys
import time
from multiprocessing import shared_memory

import grpc
import numpy as np
from inference import grpc_service_pb2 as ipb, grpc_service_pb2_grpc as ipb_grpc
from mha.v1 import attention_pb2 as pb, attention_pb2_grpc as pb_grpc
from shm_checks import check, refused  # tests/service/shm_checks.py

MODEL = "format_safetensors"  # self-attention, E = 16, H = 4; its io.safetensors has the answers
LLAMA = "llama"  # tests/fixtures/llama/stack4_sessions
CODE = grpc.StatusCode


def read_safetensors(path):
    """{name: float32 array} of a safetensors file (F32 tensors)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    return {k: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]],
                             dtype=np.float32).reshape(v["shape"])
            for k, v in header.items() if k != "__metadata__"}


def place(ref, region, size=None, offset=None):
    ref.shared_memory_region = region
    if size is not None:
        ref.shared_memory_byte_size = size
    if offset is not None:
        ref.shared_memory_offset = offset


def in_region(shape, region, size, offset=None):
    t = pb.Tensor(dtype=pb.FLOAT32, shape=shape)
    place(t.shared_memory, region, size, offset)
    return t


def read(shm, offset, shape):
    n = int(np.prod(shape)) * 4
    return np.frombuffer(bytes(shm.buf[offset:offset + n]), dtype=np.float32).reshape(shape)


class Forwards:
    """The fixture's query in region "in" at 0; output at 0 and attn_weights after it in "out"."""

    def __init__(self, stub, fixture):
        self.stub = stub
        self.io = read_safetensors(os.path.join(fixture, "io.safetensors"))
        self.q = self.io["query"]
        self.q_bytes, self.out_bytes = self.q.nbytes, self.io["output"].nbytes
        self.w_bytes = self.io["attn_weights"].nbytes

    def request(self, query_in_shm=True, output=True, weights=True):
        r = pb.ForwardRequest(model=MODEL, need_weights=True, average_attn_weights=False)
        if query_in_shm:
            r.query.CopyFrom(in_region(self.q.shape, "in", self.q_bytes))
        else:
            r.query.CopyFrom(pb.Tensor(dtype=pb.FLOAT32, shape=self.q.shape, data=self.q.tobytes()))
        if output:
            place(r.output_shared_memory, "out", self.out_bytes)
        if weights:
            place(r.attn_weights_shared_memory, "out", self.w_bytes, self.out_bytes)
        return r

    def expect(self, out, response, what, output=True, weights=True):
        got_o = read(out, 0, self.io["output"].shape) if output else \
            np.frombuffer(response.output.data, np.float32).reshape(self.io["output"].shape)
        got_w = read(out, self.out_bytes, self.io["attn_weights"].shape) if weights else \
            np.frombuffer(response.attn_weights.data, np.float32).reshape(
                self.io["attn_weights"].shape)
        err = max(float(np.abs(got_o - self.io["output"]).max()),
                  float(np.abs(got_w - self.io["attn_weights"]).max()))
        check(err <= 1e-5, f"{what}: output and attn_weights == PyTorch (err {err:.2e})")


def test_forward(f, inp, out):
    inp.buf[:f.q_bytes] = f.q.tobytes()
    out.buf[:] = b"\xff" * out.size
    response = f.stub.Forward(f.request())
    o, w = response.output, response.attn_weights
    check(not o.data and not w.data, "Forward: outputs in shared memory carry no bytes")
    check(o.dtype == pb.FLOAT32 and list(o.shape) == [2, 5, 16]
          and o.shared_memory.shared_memory_region == "out"
          and o.shared_memory.shared_memory_byte_size == f.out_bytes
          and not o.shared_memory.HasField("shared_memory_offset"),
          "Forward: output's dtype, shape and place (byte size = bytes written)")
    check(list(w.shape) == [2, 4, 5, 5] and w.shared_memory.shared_memory_offset == f.out_bytes,
          "Forward: attn_weights' shape and place")
    f.expect(out, response, "Forward, query in shm, both outputs into shm")
    for query_in_shm, output, weights in [(False, True, False), (True, False, True),
                                          (True, False, False)]:
        out.buf[:] = b"\xff" * out.size
        response = f.stub.Forward(f.request(query_in_shm, output, weights))
        what = (f"mixed: query {'shm' if query_in_shm else 'in-band'}, output "
                f"{'shm' if output else 'in-band'}, attn_weights {'shm' if weights else 'in-band'}")
        check(bool(response.output.data) != output and bool(response.attn_weights.data) != weights,
              what + ": in-band tensors carry bytes, shm ones none")
        f.expect(out, response, what, output, weights)
    out.buf[:] = b"\xff" * out.size
    answers = list(f.stub.ForwardStream(iter([f.request(), f.request(False, True, False)])))
    check(len(answers) == 2, "ForwardStream: two answers")
    f.expect(out, answers[1], "ForwardStream (2nd message: query in-band, output in shm)",
             True, False)


def test_forward_refusals(f):
    def forward(**changes):
        r = f.request()
        for path, value in changes.items():
            target = r
            *parents, leaf = path.split("__")
            for p in parents:
                target = getattr(target, p)
            if value is None:
                target.ClearField(leaf)
            else:
                setattr(target, leaf, value)
        return lambda: f.stub.Forward(r)

    bad = CODE.INVALID_ARGUMENT
    refused(forward(query__shared_memory__shared_memory_region="nope"), CODE.NOT_FOUND,
            "query: shared memory region 'nope' is not registered (registered: 'in', 'out', "
            "'step_in', 'step_out')")
    refused(forward(query__shared_memory__shared_memory_byte_size=None), bad,
            "query: shared_memory.shared_memory_region 'in' without shared_memory_byte_size "
            "(give the tensor's byte size)")
    refused(forward(query__shared_memory__shared_memory_region=""), bad,
            "query: shared_memory.shared_memory_byte_size without shared_memory_region "
            "(name the region too)")
    r = f.request()
    r.query.shared_memory.ClearField("shared_memory_byte_size")
    r.query.shared_memory.shared_memory_region = ""
    r.query.shared_memory.shared_memory_offset = 8
    refused(lambda: f.stub.Forward(r), bad,
            "query: shared_memory.shared_memory_offset without shared_memory_region")
    refused(forward(query__data=b"\0" * f.q_bytes), bad,
            "query: data must not be set when the tensor is in shared memory region 'in'")
    refused(forward(query__shared_memory__shared_memory_byte_size=f.q_bytes - 4), bad,
            f"query: shared_memory_byte_size {f.q_bytes - 4} (region 'in') is not the tensor's "
            "160 x 4 bytes (shape [2, 5, 16]")
    refused(forward(query__shared_memory__shared_memory_offset=4000), bad,
            f"query: shared_memory_offset + shared_memory_byte_size 4000 + {f.q_bytes} = "
            f"{4000 + f.q_bytes} is past the end of region 'in' (4096 bytes)")
    refused(forward(output_shared_memory__shared_memory_byte_size=16), bad,
            "output: shared_memory_byte_size 16 (region 'out') is too small for the output's "
            f"{f.out_bytes} bytes (shape [2, 5, 16]")
    refused(forward(attn_weights_shared_memory__shared_memory_region="gone"), CODE.NOT_FOUND,
            "attn_weights: shared memory region 'gone' is not registered")
    refused(forward(output_shared_memory__shared_memory_byte_size=None), bad,
            "output: shared_memory.shared_memory_region 'out' without shared_memory_byte_size")
    refused(forward(need_weights=False), bad,
            "attn_weights_shared_memory: needs need_weights and dense weights")
    # A refusal leaves the server serving: the next request is answered.
    check(f.stub.Forward(f.request()).output.shared_memory.shared_memory_region == "out",
          "after the refusals the server answers")


class Steps:
    """One LayerSteps stream driven message by message."""

    def __init__(self, stub):
        self._requests = queue.Queue()
        self._answers = stub.LayerSteps(iter(self._requests.get, None))

    def send(self, request):
        self._requests.put(request)
        return next(self._answers)

    def close(self):
        self._requests.put(None)
        for _ in self._answers:
            pass


def run_layer_steps(stub, fixture, step_in, step_out, shm):
    """The fixture's sessions stepped through every layer; the outputs per session and layer.
    With `shm`: hidden states written into `step_in`, outputs read from `step_out`."""
    info = stub.GetModel(pb.GetModelRequest(name=LLAMA))
    case = json.load(open(os.path.join(fixture, "case.json")))
    io = read_safetensors(os.path.join(fixture, "io.safetensors"))
    inputs = [io[f"s{i}.input"] for i in range(len(case["sessions"]))]
    chunks = [s["prefill"] + [1] * s["steps"] for s in case["sessions"]]
    sessions = [stub.OpenSession(pb.OpenSessionRequest(model=LLAMA)).session_id for _ in inputs]
    outputs = [[[] for _ in range(info.num_layers)] for _ in inputs]
    stream, done = Steps(stub), [0] * len(inputs)
    for r in range(max(len(c) for c in chunks)):
        active = [i for i in range(len(inputs)) if r < len(chunks[i])]
        x = [inputs[i][done[i]:done[i] + chunks[i][r]] for i in active]
        for layer in range(info.num_layers):
            request = pb.LayerStepRequest(id=f"r{r}.l{layer}", layer=layer)
            at = 0
            for k, i in enumerate(active):
                e = request.entries.add(session_id=sessions[i])
                if shm:
                    step_in.buf[at:at + x[k].nbytes] = np.ascontiguousarray(x[k]).tobytes()
                    e.hidden.CopyFrom(in_region(x[k].shape, "step_in", x[k].nbytes, at))
                    place(e.output_shared_memory, "step_out", x[k].nbytes, at)
                    at += x[k].nbytes
                else:
                    e.hidden.CopyFrom(pb.Tensor(dtype=pb.FLOAT32, shape=x[k].shape,
                                                data=np.ascontiguousarray(x[k]).tobytes()))
            answer = stream.send(request)
            if answer.HasField("error"):
                raise SystemExit(f"FAIL: {request.id}: {answer.error.message}")
            at = 0
            for k, i in enumerate(active):
                t = answer.outputs[k]
                if shm:
                    assert not t.data and t.shared_memory.shared_memory_region == "step_out"
                    y = read(step_out, at, tuple(t.shape))
                    at += y.nbytes
                else:
                    y = np.frombuffer(t.data, np.float32).reshape(tuple(t.shape))
                outputs[i][layer].append(y.copy())
                x[k] = x[k] + y
        for i in active:
            done[i] += chunks[i][r]
    stream.close()
    for sid in sessions:
        stub.CloseSession(pb.CloseSessionRequest(session_id=sid))
    err = max(float(np.abs(np.concatenate(outputs[i][l]) - io[f"s{i}.output.{l}"]).max())
              for i in range(len(inputs)) for l in range(info.num_layers))
    return outputs, err


def test_layer_steps(stub, fixture, step_in, step_out):
    in_band, err_band = run_layer_steps(stub, fixture, step_in, step_out, shm=False)
    in_shm, err_shm = run_layer_steps(stub, fixture, step_in, step_out, shm=True)
    check(err_shm <= 1e-5, f"LayerSteps through shm == PyTorch (err {err_shm:.2e}, "
          f"in-band {err_band:.2e})")
    same = all(np.array_equal(a, b) for s, t in zip(in_band, in_shm) for l, m in zip(s, t)
               for a, b in zip(l, m))
    check(same, "LayerSteps through shm == in-band, bit for bit")
    # A refused entry answers that message with its error; the stream goes on.
    sid = stub.OpenSession(pb.OpenSessionRequest(model=LLAMA)).session_id
    stream = Steps(stub)
    request = pb.LayerStepRequest(id="bad", layer=0)
    request.entries.add(session_id=sid, hidden=in_region([1, 32], "step_in", 64))
    answer = stream.send(request)
    check(answer.error.code == CODE.INVALID_ARGUMENT.value[0] and
          "entries[0].hidden: shared_memory_byte_size 64 (region 'step_in') is not the tensor's "
          "32 x 4 bytes" in answer.error.message, f"LayerSteps refusal: {answer.error.message}")
    request = pb.LayerStepRequest(id="small", layer=0)
    e = request.entries.add(session_id=sid, hidden=in_region([1, 32], "step_in", 128))
    place(e.output_shared_memory, "step_out", 64)
    answer = stream.send(request)
    check(answer.error.code == CODE.INVALID_ARGUMENT.value[0] and
          "entries[0].output: shared_memory_byte_size 64 is too small for the output's 128 bytes "
          "(shape [1, 32] float32)" in answer.error.message,
          f"LayerSteps refusal: {answer.error.message}")
    request = pb.LayerStepRequest(id="ok", layer=0)
    e = request.entries.add(session_id=sid, hidden=in_region([1, 32], "step_in", 128))
    answer = stream.send(request)
    check(not answer.HasField("error"), "LayerSteps: the stream goes on")
    # Refused before the step: the session holds only this token.
    check(list(answer.layer_tokens) == [1], f"no step ran for the refused one: {answer}")
    stream.close()
    stub.CloseSession(pb.CloseSessionRequest(session_id=sid))


def wait_until(condition, what, timeout=60):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"FAIL: {what} (not within {timeout} s)")
        time.sleep(0.002)  # polling for a state, as WaitUntil does; no timing is relied on
    print("ok:", what)


def test_unregister_during_held_forward(oip, f, hold_dir):
    """Unregister while a held mha.v1 Forward uses the regions: the names go at once (Status:
    NOT_FOUND), Unregister answers only after the request, which is answered right."""
    objects = [shared_memory.SharedMemory(create=True, size=4096) for _ in range(2)]
    try:
        for name, shm in zip(("in", "out"), objects):
            oip.SystemSharedMemoryRegister(ipb.SystemSharedMemoryRegisterRequest(
                name=name, key="/" + shm.name, byte_size=shm.size))
        objects[0].buf[:f.q_bytes] = f.q.tobytes()
        k = len([n for n in os.listdir(hold_dir) if n.startswith("entered.")]) + 1
        open(os.path.join(hold_dir, "hold"), "w").close()
        try:
            forward = f.stub.Forward.future(f.request())
            wait_until(lambda: os.path.exists(os.path.join(hold_dir, f"entered.{k}")),
                       "the Forward's pass reaches the hold gate")
            unregister = oip.SystemSharedMemoryUnregister.future(
                ipb.SystemSharedMemoryUnregisterRequest())

            def gone():
                try:
                    oip.SystemSharedMemoryStatus(ipb.SystemSharedMemoryStatusRequest(name="in"))
                    return False
                except grpc.RpcError as e:
                    return e.code() == CODE.NOT_FOUND
            wait_until(gone, "Unregister removes the names at once (Status: NOT_FOUND)")
            check(not unregister.done(), "Unregister has not answered while the Forward is held")
        finally:
            os.remove(os.path.join(hold_dir, "hold"))
        f.expect(objects[1], forward.result(timeout=60), "the held Forward, then Unregister")
        unregister.result(timeout=60)
    finally:
        for shm in objects:
            shm.close()
            shm.unlink()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--target", required=True)
    p.add_argument("--fixture", required=True, help="tests/fixtures/cases/format_safetensors")
    p.add_argument("--llama-fixture", required=True, help="tests/fixtures/llama/stack4_sessions")
    p.add_argument("--hold-dir", required=True, help="the server's --test-hold-dir")
    args = p.parse_args()
    channel = grpc.insecure_channel(args.target)
    oip = ipb_grpc.GRPCInferenceServiceStub(channel)
    stub = pb_grpc.AttentionServiceStub(channel)
    objects = {name: shared_memory.SharedMemory(create=True, size=size)
               for name, size in [("in", 4096), ("out", 4096), ("step_in", 65536),
                                  ("step_out", 65536)]}
    try:
        for name, shm in objects.items():
            oip.SystemSharedMemoryRegister(ipb.SystemSharedMemoryRegisterRequest(
                name=name, key="/" + shm.name, byte_size=shm.size))
        f = Forwards(stub, args.fixture)
        test_forward(f, objects["in"], objects["out"])
        test_forward_refusals(f)
        test_layer_steps(stub, args.llama_fixture, objects["step_in"], objects["step_out"])
        oip.SystemSharedMemoryUnregister(ipb.SystemSharedMemoryUnregisterRequest())
        refused(lambda: stub.Forward(f.request()), CODE.NOT_FOUND,
                "query: shared memory region 'in' is not registered")
        test_unregister_during_held_forward(oip, f, args.hold_dir)
    finally:
        for shm in objects.values():
            shm.close()
            shm.unlink()
    print("v1_shm_test: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
