#!/usr/bin/python3
"""The FFN side of attention-FFN disaggregation over mha.v1 LayerSteps, in Python
(docs/afd.md, "The step stream").

Opens decoding sessions on a Llama model ("architecture": "llama" in GetModel), then for each token
sends one LayerStepRequest per layer carrying every session's hidden states [t, E] and gets the
layer's attention outputs [t, E] back in the same order; between layers it adds them to each
session's residual stream (a real FFN side would run its MLP there). With --fixture DIR (a case of
tests/fixtures/llama written by PyTorch) it steps that case's sessions (prefill chunks, then single
tokens) and checks every output against the fixture's causal forward of the layer; exits 1 on a
mismatch. With --shm every entry's hidden states go through a shared-memory region and its
outputs come back through another (shm_regions.py; the server needs --allow-client-shm=true).
Needs only grpcio, protobuf and numpy.

    client/python/gen_stubs.sh                   # once: generates mha/v1/*_pb2*.py
    /usr/bin/python3 client/python/afd_example.py --target localhost:8500 --model llama \\
        --fixture tests/fixtures/llama/stack4_sessions
"""
import argparse
import json
import os
import queue
import struct
import sys

import grpc
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mha.v1 import attention_pb2 as pb, attention_pb2_grpc as rpc  # noqa: E402 (gen_stubs.sh)
from shm_regions import ShmRegions  # noqa: E402


def to_wire(a):
    a = np.ascontiguousarray(a, dtype=np.float32)
    return pb.Tensor(dtype=pb.FLOAT32, shape=a.shape, data=a.tobytes())


def from_wire(t):
    assert t.dtype == pb.FLOAT32, t.dtype
    return np.frombuffer(t.data, dtype=np.float32).reshape(tuple(t.shape))


def read_safetensors(path):
    """{name: float32 array} of a safetensors file (F32 tensors only: the fixtures' io files)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], dtype=np.float32).reshape(info["shape"])
    return out


class LayerSteps:
    """One LayerSteps stream driven message by message: send() writes a request, reads its answer."""

    def __init__(self, stub):
        self._requests = queue.Queue()
        self._answers = stub.LayerSteps(iter(self._requests.get, None))

    def send(self, request):
        self._requests.put(request)
        answer = next(self._answers)
        assert answer.id == request.id, (answer.id, request.id)
        if answer.HasField("error"):
            raise RuntimeError(f"{request.id}: code {answer.error.code}: {answer.error.message}")
        return answer

    def close(self):
        self._requests.put(None)
        for _ in self._answers:  # the stream ends once every answer is read
            pass


def step_layer(stream, layer, sessions, rows, tag, regions=None):
    """One message: `rows[i]` [t, E] of sessions[i] at `layer`; the outputs in the same order.
    With `regions` the rows go through its input region and the outputs through its output one."""
    request = pb.LayerStepRequest(id=f"{tag}.l{layer}", layer=layer)
    at = 0
    for sid, x in zip(sessions, rows):
        entry = request.entries.add(session_id=sid, hidden=to_wire(x))
        if regions:
            size = len(entry.hidden.data)
            entry.hidden.CopyFrom(regions.put(entry.hidden, at))
            regions.place_output(entry.output_shared_memory, size, at)
            at += size
    answer = stream.send(request)
    outputs = [regions.get(t) if regions else t for t in answer.outputs]
    return [from_wire(t) for t in outputs], list(answer.layer_tokens)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--target", default="localhost:8500")
    p.add_argument("--model", default="", help="a Llama model ('' = the default model)")
    p.add_argument("--fixture", help="a tests/fixtures/llama case: step its sessions and check")
    p.add_argument("--sessions", type=int, default=4, help="without --fixture: sessions")
    p.add_argument("--steps", type=int, default=8, help="without --fixture: decode steps")
    p.add_argument("--prefill", type=int, default=5, help="without --fixture: prefill tokens")
    p.add_argument("--atol", type=float, default=1e-5)
    p.add_argument("--shm", action="store_true",
                   help="hidden states and outputs through shared memory (docs/shared-memory.md)")
    args = p.parse_args()
    channel = grpc.insecure_channel(args.target)
    stub = rpc.AttentionServiceStub(channel)
    info = stub.GetModel(pb.GetModelRequest(name=args.model))
    if info.architecture != "llama":
        print(f"model {info.name} is not a Llama model ({info.architecture})")
        return 1
    print(f"model {info.name}: {info.num_layers} layers, E={info.embed_dim} H={info.num_heads} "
          f"KV={info.num_key_value_heads} D={info.head_dim}, "
          f"{info.kv_bytes_per_token_per_layer} KV bytes per token per layer")
    if args.fixture:
        case = json.load(open(os.path.join(args.fixture, "case.json")))
        io = read_safetensors(os.path.join(args.fixture, "io.safetensors"))
        inputs = [io[f"s{i}.input"] for i in range(len(case["sessions"]))]
        expected = [[io[f"s{i}.output.{l}"] for l in range(info.num_layers)]
                    for i in range(len(inputs))]
        chunks = [s["prefill"] + [1] * s["steps"] for s in case["sessions"]]
    else:
        rng = np.random.default_rng(0)
        inputs = [rng.standard_normal((args.prefill + args.steps, info.embed_dim), np.float32)
                  for _ in range(args.sessions)]
        expected = None
        chunks = [[args.prefill] + [1] * args.steps for _ in inputs]
    sessions = [stub.OpenSession(pb.OpenSessionRequest(model=info.name)).session_id
                for _ in inputs]
    stream = LayerSteps(stub)
    # Big enough for every session's largest chunk at once.
    regions = ShmRegions(channel, 4 * info.embed_dim * sum(max(c) for c in chunks)) \
        if args.shm else None
    done, worst = [0] * len(inputs), 0.0
    for r in range(max(len(c) for c in chunks)):
        active = [i for i in range(len(inputs)) if r < len(chunks[i])]
        x = [inputs[i][done[i]:done[i] + chunks[i][r]] for i in active]
        for layer in range(info.num_layers):
            outs, tokens = step_layer(stream, layer, [sessions[i] for i in active], x, f"r{r}",
                                      regions)
            for k, i in enumerate(active):
                assert tokens[k] == done[i] + chunks[i][r], (tokens[k], done[i], chunks[i][r])
                if expected is not None:
                    want = expected[i][layer][done[i]:done[i] + chunks[i][r]]
                    worst = max(worst, float(np.abs(outs[k] - want).max()))
                x[k] = x[k] + outs[k]  # the residual stream; an FFN side runs its MLP here
        for i in active:
            done[i] += chunks[i][r]
    stream.close()
    if regions:
        regions.close()
    for sid in sessions:
        closed = stub.CloseSession(pb.CloseSessionRequest(session_id=sid))
        print(f"session {sid}: {closed.tokens} tokens, {closed.kv_blocks} KV blocks freed")
    if expected is not None:
        print(f"max abs error vs PyTorch {worst:.3g}")
        if worst > args.atol:
            print(f"MISMATCH: {worst} > {args.atol}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
