#!/usr/bin/python3
"""Calls mha-server's Open Inference Protocol endpoint (inference.GRPCInferenceService, as
tritonclient / KServe clients do) and checks the answer against PyTorch.

The same check as mha_client_example.py (whose weight readers and reference it reuses), over
ModelInfer: query, key and value as FP32 in raw_input_contents (or in contents.fp32_contents with
--typed), parameters average_attn_weights = false, outputs output and attn_weights requested.
Exits 1 on any mismatch.

    client/python/gen_stubs.sh                       # once: mha/v1 and inference/ stubs
    /usr/bin/python3 client/python/oip_client_example.py --target localhost:8500 \\
        --model format_safetensors --weights tests/fixtures/cases/format_safetensors/model.safetensors
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mha_client_example as native  # noqa: E402  (weights, reference, channel)
from inference import grpc_service_pb2 as pb, grpc_service_pb2_grpc as pb_grpc  # noqa: E402


def add_input(request, name, tensor, typed):
    tensor = tensor.contiguous().float()
    entry = request.inputs.add(name=name, datatype="FP32", shape=list(tensor.shape))
    if typed:
        entry.contents.fp32_contents.extend(tensor.flatten().tolist())
    else:
        request.raw_input_contents.append(tensor.numpy().tobytes())


def outputs_of(response):
    """name -> tensor, from raw_output_contents in the order of outputs (FP32 only here)."""
    out = {}
    for meta, raw in zip(response.outputs, response.raw_output_contents):
        if meta.datatype != "FP32":
            raise SystemExit(f"{meta.name}: datatype {meta.datatype}, this example reads FP32")
        out[meta.name] = torch.frombuffer(bytearray(raw), dtype=torch.float32).reshape(
            tuple(meta.shape)).clone()
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    native.add_common_args(p)
    p.add_argument("--typed", action="store_true", help="send contents.fp32_contents, not raw")
    args = p.parse_args()

    stub = pb_grpc.GRPCInferenceServiceStub(native.make_channel(args))
    if not stub.ServerReady(pb.ServerReadyRequest(), timeout=30).ready:
        print("server is not ready", file=sys.stderr)
        return 1
    model_config = stub.ModelConfig(pb.ModelConfigRequest(name=args.model), timeout=30).config
    config_path = args.config or os.path.join(os.path.dirname(args.weights), "config.json")
    config = json.load(open(config_path)) if os.path.exists(config_path) else {}
    num_heads = config.get("num_heads", int(model_config.parameters["num_heads"].string_value))
    mha = native.build_module(native.read_state_dict(args.weights), num_heads,
                              config.get("add_zero_attn", False), config.get("prefix", ""))

    torch.manual_seed(args.seed)
    query = torch.randn(args.batch, args.seq, mha.embed_dim)
    key = torch.randn(args.batch, args.kv_seq, mha.kdim)
    value = torch.randn(args.batch, args.kv_seq, mha.vdim)
    request = pb.ModelInferRequest(model_name=model_config.name, id="python-oip-example")
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        add_input(request, name, tensor, args.typed)
    request.parameters["average_attn_weights"].bool_param = False
    request.outputs.add(name="output")
    request.outputs.add(name="attn_weights")  # implies need_weights
    response = stub.ModelInfer(request, timeout=30)
    got = outputs_of(response)
    ref_out, ref_weights = native.reference(mha, query, key, value)

    failures = []
    for name, want in (("output", ref_out), ("attn_weights", ref_weights)):
        if name not in got:
            failures.append(f"{name}: missing from the response")
        elif tuple(got[name].shape) != tuple(want.shape):
            failures.append(f"{name}: shape {tuple(got[name].shape)} != {tuple(want.shape)}")
        else:
            diff = (got[name].double() - want).abs().max().item()
            print(f"{name}: shape {tuple(want.shape)} max |server - pytorch| = {diff:.3g}")
            if not diff <= args.atol:
                failures.append(f"{name}: max abs diff {diff:.3g} > {args.atol}")
    if response.id != request.id:
        failures.append(f"id not echoed (got {response.id!r})")
    print(f"model {response.model_name} v{response.model_version}: "
          f"queue {response.parameters['queue_us'].int64_param} us, "
          f"compute {response.parameters['compute_us'].int64_param} us")
    if failures:
        print("MISMATCH:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    print("OK: ModelInfer matches torch.nn.functional.multi_head_attention_forward")
    return 0


if __name__ == "__main__":
    sys.exit(main())
