#!/usr/bin/python3
"""Deterministic PyTorch reference-fixture generator for mha-serve.

Usage (must be Debian's interpreter, which has python3-torch):

    /usr/bin/python3 tools/gen_fixtures.py --out tests/fixtures
    /usr/bin/python3 tools/gen_fixtures.py --out tests/fixtures --check   # only re-validate

Regenerates tests/fixtures/{cases,bad}/ and the two README.md files from
scratch. Output is byte-identical on rerun: every case seeds torch's RNG,
JSON is written with sorted keys, safetensors files are written by hand with
sorted tensor names.

Reference semantics: torch.nn.MultiheadAttention(batch_first=True), eval mode,
PyTorch 2.x mask rules (see README_TEXT in fixture_readme.py). Expected values are computed in
float64 through torch.nn.functional.multi_head_attention_forward (the slow
path) with one merged additive float mask of shape [B*H, T, S], then stored as
float32.

Only torch and the standard modules json, struct, os, argparse, math (+ sys for
the re-exec below) are used.

TorchScript serialisation writes each class's Final constants in Python set
order, which depends on string hashing; so the script re-executes itself with
PYTHONHASHSEED=0 to make model.pt of the TorchScript case byte-identical.
"""

import argparse
import json
import math
import os
import struct
import sys

if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    _env = dict(os.environ, PYTHONHASHSEED="0")
    os.execve(sys.executable, [sys.executable] + sys.argv, _env)

import torch
import torch.nn as nn
import torch.nn.functional as F

# head_reference.py reads these helpers off this module.
from fixture_io import (read_safetensors, rmtree, safetensors_bytes, stable_seed, tensor_bytes,
                        write_bytes, write_json, write_safetensors, write_text)
from fixture_math import (FusedQKV, layout_tensors, make_mha, merged_mask, module_self_check,
                          packed_state, rand_bool_mask, reference_forward, reinit_, split_qkv,
                          to_additive)
from fixture_bad import BAD, gen_bad  # noqa: F401
from fixture_check import check  # noqa: F401
from fixture_readme import README_TEXT


# ----------------------------------------------------------------------------
# case generation
# ----------------------------------------------------------------------------

CASES = []  # names in generation order
SELF_CHECKED = []  # cases also checked against the module's own float32 forward


def emit_case(out_root, name, description, mha, query, key=None, value=None,
              key_padding_mask=None, attn_mask=None, is_causal=False,
              need_weights=True, average_attn_weights=False, fmt="safetensors",
              layout=None, weights_tensors=None, weights_module=None, prefix="",
              config_prefix=None, self_check=True):
    """Compute the reference, write the case folder and register it."""
    cross = key is not None
    k = key if cross else query
    v = value if cross else query
    out, w = reference_forward(mha, query, k, v, key_padding_mask, attn_mask,
                               is_causal, average_attn_weights)
    B, T, E = query.shape
    S = k.shape[1]
    S_eff = S + (1 if mha.bias_k is not None else 0) + (1 if mha.add_zero_attn else 0)
    exp_w_shape = (B, T, S_eff) if average_attn_weights else (B, mha.num_heads, T, S_eff)
    assert tuple(w.shape) == exp_w_shape, (name, tuple(w.shape), exp_w_shape)

    has_bias = mha.in_proj_bias is not None
    if (self_check and key_padding_mask is None and attn_mask is None and not is_causal
            and has_bias and mha._qkv_same_embed_dim):
        module_self_check(mha, query, k, v, out, w, need_weights, average_attn_weights)
        SELF_CHECKED.append(name)

    d = os.path.join(out_root, "cases", name)
    os.makedirs(d, exist_ok=True)

    if layout is None:
        layout = "packed" if mha._qkv_same_embed_dim else "separate_proj"

    # weights file
    if fmt == "safetensors":
        weights_file = "model.safetensors"
        tensors = weights_tensors if weights_tensors is not None else packed_state(mha)
        write_safetensors(os.path.join(d, weights_file), tensors)
    elif fmt == "torch_save":
        weights_file = "model.pt"
        mod = weights_module if weights_module is not None else mha
        p = os.path.join(d, weights_file)
        torch.save(mod.state_dict(), p)
        back = torch.load(p)
        ref_sd = mod.state_dict()
        assert list(back.keys()) == list(ref_sd.keys())
        for kk in ref_sd:
            assert torch.equal(back[kk], ref_sd[kk])
    elif fmt == "torchscript":
        weights_file = "model.pt"
        p = os.path.join(d, weights_file)
        scripted = torch.jit.script(mha.eval())
        scripted.eval()
        scripted.save(p)
        loaded = torch.jit.load(p)
        assert not loaded.training
        with torch.no_grad():
            o2, w2 = loaded(query, k, v, None, need_weights, None, average_attn_weights)
        assert (o2.double() - out).abs().max().item() <= 1e-5
    else:
        raise ValueError(fmt)

    # config.json
    cfg = {"num_heads": mha.num_heads}
    if mha.add_zero_attn:
        cfg["add_zero_attn"] = True
    cp = prefix if config_prefix is None else config_prefix
    if cp:
        cfg["prefix"] = cp
    write_json(os.path.join(d, "config.json"), cfg)

    # io.safetensors
    io = {"query": query.to(torch.float32).contiguous(),
          "output": out.to(torch.float32).contiguous()}
    if cross:
        io["key"] = key.contiguous()
        io["value"] = value.contiguous()
    if key_padding_mask is not None:
        io["key_padding_mask"] = key_padding_mask.contiguous()
    if attn_mask is not None:
        io["attn_mask"] = attn_mask.contiguous()
    if need_weights:
        io["attn_weights"] = w.to(torch.float32).contiguous()
    write_safetensors(os.path.join(d, "io.safetensors"), io)

    # case.json
    case = {
        "name": name,
        "description": description,
        "weights_file": weights_file,
        "is_causal": bool(is_causal),
        "need_weights": bool(need_weights),
        "average_attn_weights": bool(average_attn_weights),
        "expect": {
            "embed_dim": mha.embed_dim,
            "num_heads": mha.num_heads,
            "kdim": mha.kdim,
            "vdim": mha.vdim,
            "bias": has_bias,
            "add_bias_kv": mha.bias_k is not None,
            "add_zero_attn": bool(mha.add_zero_attn),
            "format": fmt,
            "layout": layout,
            "prefix": cp,
        },
    }
    write_json(os.path.join(d, "case.json"), case)
    CASES.append(name)


def inputs(B, T, E, S=None, kdim=None, vdim=None):
    q = torch.randn(B, T, E)
    if S is None:
        return q, None, None
    k = torch.randn(B, S, kdim or E)
    v = torch.randn(B, S, vdim or E)
    return q, k, v


def std_case(out, name, description, E=16, H=4, B=2, T=5, S=None, kdim=None, vdim=None,
             bias=True, add_bias_kv=False, add_zero_attn=False, kpm=None, attn_mask=None,
             is_causal=False, need_weights=True, average=False, fmt="safetensors",
             seed=None):
    torch.manual_seed(stable_seed(name) if seed is None else seed)
    mha = make_mha(E, H, bias=bias, add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn,
                   kdim=kdim, vdim=vdim)
    cross = S is not None or kdim is not None or vdim is not None
    if cross and S is None:
        S = T
    q, k, v = inputs(B, T, E, S if cross else None, kdim, vdim)
    S_ = S if cross else T
    kp = None
    if kpm == "bool":
        kp = torch.rand(B, S_) < 0.4
        kp[:, 0] = False  # never mask key 0 (keeps causal row 0 and every row alive)
    elif kpm == "float":
        kp = torch.randn(B, S_) * 2
    am = None
    if attn_mask == "2d_bool":
        am = rand_bool_mask((T, S_))
    elif attn_mask == "2d_float":
        am = torch.randn(T, S_) * 2
    elif attn_mask == "3d_bool":
        am = rand_bool_mask((B * H, T, S_))
    elif attn_mask == "3d_float":
        am = torch.randn(B * H, T, S_) * 2
    emit_case(out, name, description, mha, q, k, v, key_padding_mask=kp, attn_mask=am,
              is_causal=is_causal, need_weights=need_weights, average_attn_weights=average,
              fmt=fmt)


def gen_cases(out):
    std_case(out, "self_basic", "self-attention, B=2 T=5, packed safetensors, per-head weights")
    std_case(out, "self_avg_weights", "self-attention, weights averaged over heads", average=True)
    std_case(out, "self_no_weights", "self-attention, need_weights=false (no attn_weights stored)",
             need_weights=False)
    std_case(out, "cross_attention", "cross-attention T=4 S=6, key and value distinct", T=4, S=6)
    std_case(out, "kdim_vdim", "kdim=12 vdim=20, separate q/k/v proj weights + in_proj_bias",
             T=4, S=6, kdim=12, vdim=20)
    std_case(out, "kdim_vdim_nobias", "kdim=12 vdim=20, bias=False (no in_proj_bias/out_proj.bias)",
             T=4, S=6, kdim=12, vdim=20, bias=False)
    std_case(out, "self_nobias", "self-attention, bias=False, packed (no bias keys)", bias=False)
    std_case(out, "add_bias_kv", "add_bias_kv=True (bias_k/bias_v [1,1,E]); weights have S+1 columns",
             add_bias_kv=True)
    std_case(out, "add_zero_attn", "add_zero_attn=True (config.json); weights have S+1 columns",
             add_zero_attn=True)
    std_case(out, "bias_kv_zero_attn_kpm",
             "add_bias_kv + add_zero_attn + bool key_padding_mask; weights have S+2 columns",
             T=4, S=6, add_bias_kv=True, add_zero_attn=True, kpm="bool")
    std_case(out, "kpm_bool", "bool key_padding_mask [B,S] (True = masked)", T=4, S=6, kpm="bool")
    std_case(out, "kpm_float", "float (additive) key_padding_mask [B,S]", T=4, S=6, kpm="float")
    std_case(out, "attn_mask_2d_bool", "bool attn_mask [T,S] (True = masked)", T=4, S=6,
             attn_mask="2d_bool")
    std_case(out, "attn_mask_2d_float", "float additive attn_mask [T,S]", T=4, S=6,
             attn_mask="2d_float")
    std_case(out, "attn_mask_3d_bool", "bool attn_mask [B*H,T,S]", T=4, S=6, attn_mask="3d_bool")
    std_case(out, "attn_mask_3d_float", "float additive attn_mask [B*H,T,S]", T=4, S=6,
             attn_mask="3d_float")
    std_case(out, "causal", "is_causal=true self-attention T=S=6, no explicit mask", T=6,
             is_causal=True)
    std_case(out, "causal_kpm", "is_causal=true + bool key_padding_mask (key 0 never padded)", T=6,
             is_causal=True, kpm="bool")
    std_case(out, "causal_mask_kpm",
             "is_causal + float 2D attn_mask + float key_padding_mask, all three summed", T=6,
             is_causal=True, kpm="float", attn_mask="2d_float")
    std_case(out, "causal_cross", "is_causal with cross-attention T=4 S=6 (top-left aligned triu)",
             T=4, S=6, is_causal=True)
    std_case(out, "batch1", "B=1 self-attention", B=1)
    std_case(out, "query_len1", "T=1 query, S=5 cross-attention", T=1, S=5)

    # formats: same seed -> identical weights, inputs and expected values
    fseed = stable_seed("format")
    std_case(out, "format_torch_save", "torch.save(mha.state_dict()) OrderedDict, model.pt",
             fmt="torch_save", seed=fseed)
    std_case(out, "format_torchscript", "torch.jit.script(mha).save(), model.pt",
             fmt="torchscript", seed=fseed)
    std_case(out, "format_safetensors", "same weights/inputs as format_torch_save, safetensors",
             fmt="safetensors", seed=fseed)

    # layouts
    E, H = 16, 4
    for name, layout, desc in [
        ("layout_fused_qkv", "fused_qkv",
         "torch.save of a module with qkv=Linear(E,3E), proj=Linear(E,E)"),
        ("layout_wq_wk_wv", "wq_wk_wv", "safetensors W_q/W_k/W_v/fc_out .weight/.bias"),
        ("layout_q_k_v_proj", "q_k_v_proj",
         "safetensors HF-style q_proj/k_proj/v_proj/out_proj .weight/.bias"),
    ]:
        torch.manual_seed(stable_seed(name))
        mha = make_mha(E, H)
        q, _, _ = inputs(2, 5, E)
        if layout == "fused_qkv":
            mod = FusedQKV(E)
            with torch.no_grad():
                mod.qkv.weight.copy_(mha.in_proj_weight)
                mod.qkv.bias.copy_(mha.in_proj_bias)
                mod.proj.weight.copy_(mha.out_proj.weight)
                mod.proj.bias.copy_(mha.out_proj.bias)
            emit_case(out, name, desc, mha, q, fmt="torch_save", layout=layout,
                      weights_module=mod)
        else:
            emit_case(out, name, desc, mha, q, fmt="safetensors", layout=layout,
                      weights_tensors=layout_tensors(mha, layout))

    # prefix inside a bigger checkpoint (dim_feedforward kept small to keep files small)
    for name, fmt, layer, cfg_prefix in [
        ("prefix_in_checkpoint", "torch_save", 1, "layers.1.self_attn."),
        ("prefix_no_dot", "safetensors", 0, "layers.0.self_attn"),
    ]:
        torch.manual_seed(stable_seed(name))
        enc = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(d_model=16, nhead=4, dim_feedforward=32,
                                       batch_first=True),
            num_layers=2, enable_nested_tensor=False)
        reinit_(enc)
        enc.eval()
        mha = enc.layers[layer].self_attn
        q, _, _ = inputs(2, 5, 16)
        desc = "TransformerEncoder(2 layers) checkpoint; attention = %s" % cfg_prefix
        if fmt == "torch_save":
            emit_case(out, name, desc, mha, q, fmt=fmt, layout="packed", weights_module=enc,
                      config_prefix=cfg_prefix)
        else:
            tensors = {k: v.detach().clone() for k, v in enc.state_dict().items()}
            emit_case(out, name, desc, mha, q, fmt=fmt, layout="packed", weights_tensors=tensors,
                      config_prefix=cfg_prefix)

    std_case(out, "larger_e64", "E=64 H=8 B=3 T=S=9 self-attention, per-head weights (fp16/bf16 tests)",
             E=64, H=8, B=3, T=9)

    # decoding sessions (docs/sessions.md): one full causal forward over a whole sequence, the
    # reference that step-wise decoding (one token, or chunks, per step) must equal
    std_case(out, "decode_causal",
             "full causal self-attention over a 12-token sequence, E=32 H=4 B=2 (decode reference)",
             E=32, H=4, B=2, T=12, is_causal=True)
    std_case(out, "decode_causal_bias_kv_zero_attn",
             "causal self-attention T=8 + add_bias_kv + add_zero_attn + bool key_padding_mask "
             "(decode reference; weights have S+2 columns)",
             T=8, add_bias_kv=True, add_zero_attn=True, kpm="bool", is_causal=True)

    write_json(os.path.join(out, "cases", "index.json"), {"cases": list(CASES)})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures", help="output folder (tests/fixtures)")
    ap.add_argument("--check", action="store_true",
                    help="only re-validate the existing fixtures, write nothing")
    args = ap.parse_args()
    torch.set_default_dtype(torch.float32)
    torch.set_num_threads(1)
    if args.check:
        check(args.out)
        return
    os.makedirs(args.out, exist_ok=True)
    rmtree(os.path.join(args.out, "cases"))
    rmtree(os.path.join(args.out, "bad"))
    rmtree(os.path.join(args.out, "heads"))
    gen_cases(args.out)
    gen_bad(args.out)
    # Head options and head analysis (docs/heads.md), from the cases just written.
    import head_reference
    n_heads, n_requests = head_reference.gen_head_fixtures(args.out, sys.modules[__name__])
    write_text(os.path.join(args.out, "README.md"), README_TEXT)
    check(args.out)
    print("head options: %d cases x %d requests, analysis of %d models (tools/head_reference.py)"
          % (n_heads, n_requests, len(head_reference.ANALYSIS_CASES)))
    print("module float32 forward self-check passed on %d cases: %s"
          % (len(SELF_CHECKED), " ".join(SELF_CHECKED)))
    print("wrote %d cases + %d bad files to %s" % (len(CASES), len(BAD), args.out))


if __name__ == "__main__":
    main()
