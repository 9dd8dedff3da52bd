#!/usr/bin/python3
"""Calls mha-server's KServe v2 HTTP/REST endpoint with Debian's python3-requests: health, model
metadata, then one inference in JSON and one in the binary tensor extension (both ask for per-head
attention weights), one in JSON with a float mask holding -inf (Python's json, like
tritonclient.http, writes it -Infinity; the row it masks entirely comes back NaN), and a
three-step sequence (sequence_start with a 4-token prefill, one token, sequence_end). With --weights the answers are checked against PyTorch (the reference of
mha_client_example.py, which needs the gRPC stubs of gen_stubs.sh on PYTHONPATH); exit 1 on any
mismatch. Without --weights it only prints what the server answered.

    /usr/bin/python3 client/python/rest_client_example.py --url http://localhost:8501 --model enc
"""
import argparse
import json
import os
import struct
import sys

import requests
import torch


def infer_json(url, model, inputs, parameters):
    """JSON data, written by Python's json as tritonclient.http writes it: a float NaN or infinity
    becomes the bare token NaN, Infinity or -Infinity (requests' json= refuses them); the answer
    writes them the same way and json.loads reads them back."""
    body = {"id": "python-rest-json", "parameters": parameters,
            "inputs": [{"name": n, "datatype": "FP32", "shape": list(t.shape),
                        "data": t.flatten().tolist()} for n, t in inputs]}
    r = requests.post(f"{url}/v2/models/{model}/infer", data=json.dumps(body),
                      headers={"Content-Type": "application/json"}, timeout=60)
    answer = json.loads(r.content)
    if r.status_code != 200:
        raise SystemExit(f"HTTP {r.status_code}: {answer['error']}")
    return answer, {o["name"]: torch.tensor(o["data"]).reshape(o["shape"])
                    for o in answer["outputs"]}


def infer_binary(url, model, inputs, parameters):
    """The binary tensor extension: JSON header, then the inputs' bytes; answers likewise."""
    raw = [t.contiguous().float().numpy().tobytes() for _, t in inputs]
    header = json.dumps({"id": "python-rest-binary",
                         "parameters": dict(parameters, binary_data_output=True),
                         "inputs": [{"name": n, "datatype": "FP32", "shape": list(t.shape),
                                     "parameters": {"binary_data_size": len(b)}}
                                    for (n, t), b in zip(inputs, raw)]}).encode()
    r = requests.post(f"{url}/v2/models/{model}/infer", data=header + b"".join(raw),
                      headers={"Inference-Header-Content-Length": str(len(header)),
                               "Content-Type": "application/octet-stream"}, timeout=60)
    length = int(r.headers.get("Inference-Header-Content-Length", len(r.content)))
    answer = json.loads(r.content[:length])
    if r.status_code != 200:
        raise SystemExit(f"HTTP {r.status_code}: {answer['error']}")
    outputs, offset = {}, length
    for o in answer["outputs"]:
        size = o["parameters"]["binary_data_size"]
        values = struct.unpack(f"<{size // 4}f", r.content[offset:offset + size])
        outputs[o["name"]] = torch.tensor(values).reshape(o["shape"])
        offset += size
    return answer, outputs


def masked_infer(args, query, params, mha):
    """A float attn_mask with -inf (sent as -Infinity): query row 0 does not see key 1, row 1 sees
    no key at all. PyTorch gives NaN for such a row, and so must the server (sent back as NaN);
    the other rows are finite. With the weights, everything == PyTorch (NaN where it is NaN)."""
    mask = torch.zeros(args.seq, args.seq)
    mask[0, 1] = float("-inf")
    mask[1, :] = float("-inf")
    _, got = infer_json(args.url, args.model, [("query", query), ("attn_mask", mask)], params)
    nan_rows = torch.isnan(got["output"]).any(-1)  # [B, T]
    print(f"json, -inf mask: query rows with NaN in the output: "
          f"{nan_rows.any(0).nonzero().flatten().tolist()} (row 1 sees no key)")
    failures = []
    if not (torch.isnan(got["output"][:, 1]).all() and nan_rows.sum() == args.batch):
        failures.append("-inf mask: NaN in other rows than row 1, or not all of row 1")
    if mha is not None:
        import mha_client_example as native  # noqa: E402
        for name, want in zip(("output", "attn_weights"),
                              native.reference(mha, query, query, query, attn_mask=mask)):
            have = got[name].double()
            same_nan = torch.equal(torch.isnan(have), torch.isnan(want))
            diff = (have - want).nan_to_num(0.0).abs().max().item()
            print(f"  {name}: NaN where PyTorch has NaN: {same_nan}, elsewhere max |d| = {diff:.3g}")
            if not same_nan or not diff <= args.atol:
                failures.append(f"-inf mask {name}: same NaN {same_nan}, {diff:.3g} > {args.atol}")
    return failures


def causal_reference(mha, query):
    """One full causal forward in float64 (PyTorch's slow path), [B, T, E] in and out."""
    import torch.nn.functional as F
    q = query.double().transpose(0, 1)
    t = q.shape[0]
    mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
    separate = not mha._qkv_same_embed_dim
    out, _ = F.multi_head_attention_forward(
        q, q, q, mha.embed_dim, mha.num_heads, mha.in_proj_weight, mha.in_proj_bias,
        mha.bias_k, mha.bias_v, mha.add_zero_attn, 0.0, mha.out_proj.weight, mha.out_proj.bias,
        training=False, need_weights=False, attn_mask=mask, use_separate_proj_weight=separate,
        q_proj_weight=mha.q_proj_weight, k_proj_weight=mha.k_proj_weight,
        v_proj_weight=mha.v_proj_weight)
    return out.transpose(0, 1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--url", default="http://localhost:8501")
    p.add_argument("--model", default="default")
    p.add_argument("--weights", help="the weights file the server loaded: compare with PyTorch")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=6)
    p.add_argument("--atol", type=float, default=1e-5)
    args = p.parse_args()
    if args.seq < 6:
        raise SystemExit("--seq must be at least 6 (the sequence's steps cover 6 tokens)")

    if requests.get(f"{args.url}/v2/health/ready", timeout=30).status_code != 200:
        print("server is not ready", file=sys.stderr)
        return 1
    meta = requests.get(f"{args.url}/v2/models/{args.model}", timeout=30).json()
    embed = meta["inputs"][0]["shape"][2]
    print(f"model {meta['name']} versions {meta['versions']}: query [B, T, {embed}]")
    torch.manual_seed(0)
    query = torch.randn(args.batch, args.seq, embed)
    params = {"need_weights": True, "average_attn_weights": False}
    failures = []
    reference = None
    if args.weights:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import mha_client_example as native  # noqa: E402  (weights and reference)
        config_path = os.path.join(os.path.dirname(args.weights), "config.json")
        config = json.load(open(config_path)) if os.path.exists(config_path) else {}
        mha = native.build_module(native.read_state_dict(args.weights), config["num_heads"],
                                  config.get("add_zero_attn", False), config.get("prefix", ""))
        reference = native.reference(mha, query, query, query)
    for form, call in (("json", infer_json), ("binary", infer_binary)):
        answer, got = call(args.url, args.model, [("query", query)], params)
        print(f"{form}: id {answer['id']} outputs " +
              ", ".join(f"{n} {list(t.shape)}" for n, t in got.items()))
        if reference is not None:
            for name, want in zip(("output", "attn_weights"), reference):
                diff = (got[name].double() - want).abs().max().item()
                print(f"  {name}: max |server - pytorch| = {diff:.3g}")
                if not diff <= args.atol:
                    failures.append(f"{form} {name}: {diff:.3g} > {args.atol}")
    failures += masked_infer(args, query, params, mha if reference is not None else None)
    # A sequence (Triton's sequence extension on a decoding session): prefill, step, end.
    steps = [(0, 4, {"sequence_start": True}), (4, 5, {}), (5, 6, {"sequence_end": True})]
    pieces = []
    for begin, end, flags in steps:
        _, got = infer_json(args.url, args.model, [("query", query[:, begin:end])],
                            dict(flags, sequence_id=42))
        pieces.append(got["output"])
    print(f"sequence 42: {len(steps)} steps, output {list(torch.cat(pieces, 1).shape)}")
    if reference is not None:
        diff = (torch.cat(pieces, 1).double() - causal_reference(mha, query[:, :6])).abs().max().item()
        print(f"  sequence vs one causal forward: max |server - pytorch| = {diff:.3g}")
        if not diff <= args.atol:
            failures.append(f"sequence: {diff:.3g} > {args.atol}")
    if failures:
        print("MISMATCH:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
