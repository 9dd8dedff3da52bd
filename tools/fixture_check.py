#!/usr/bin/python3
"""--check: re-derive every case from its files with an independent naive float64 attention (part of tools/gen_fixtures.py; run that)."""

import json
import math
import os

import torch

from fixture_io import read_safetensors

# ----------------------------------------------------------------------------
# --check: re-validate existing fixtures
# ----------------------------------------------------------------------------


def check(out):
    with open(os.path.join(out, "cases", "index.json")) as f:
        names = json.load(f)["cases"]
    for n in names:
        d = os.path.join(out, "cases", n)
        with open(os.path.join(d, "case.json")) as f:
            case = json.load(f)
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        assert case["name"] == n and cfg["num_heads"] == case["expect"]["num_heads"]
        io, _ = read_safetensors(os.path.join(d, "io.safetensors"))
        assert "query" in io and "output" in io
        assert ("attn_weights" in io) == case["need_weights"]
        wf = os.path.join(d, case["weights_file"])
        fmt = case["expect"]["format"]
        if fmt == "safetensors":
            sd, _ = read_safetensors(wf)
        elif fmt == "torch_save":
            sd = dict(torch.load(wf))
        else:
            sd = {k: v.detach() for k, v in torch.jit.load(wf).named_parameters()}
        naive_check(n, case, cfg, sd, io)
    print("check ok: %d cases (each re-derived with an independent naive float64 attention)"
          % len(names))


def naive_check(name, case, cfg, sd, io):
    """Recompute a case from its files with a plain loop-free float64 attention
    that shares no code with F.multi_head_attention_forward."""
    ex = case["expect"]
    pre = cfg.get("prefix", "")
    if pre and not pre.endswith("."):
        pre += "."
    g = lambda k: sd[pre + k].to(torch.float64) if (pre + k) in sd else None
    E, H = ex["embed_dim"], ex["num_heads"]
    lay = ex["layout"]
    if lay == "packed":
        W, b = g("in_proj_weight"), g("in_proj_bias")
        wq, wk, wv = W[:E], W[E:2 * E], W[2 * E:]
        bq, bk, bv = (None, None, None) if b is None else (b[:E], b[E:2 * E], b[2 * E:])
        wo, bo = g("out_proj.weight"), g("out_proj.bias")
    elif lay == "separate_proj":
        wq, wk, wv = g("q_proj_weight"), g("k_proj_weight"), g("v_proj_weight")
        b = g("in_proj_bias")
        bq, bk, bv = (None, None, None) if b is None else (b[:E], b[E:2 * E], b[2 * E:])
        wo, bo = g("out_proj.weight"), g("out_proj.bias")
    elif lay == "fused_qkv":
        W, b = g("qkv.weight"), g("qkv.bias")
        wq, wk, wv = W[:E], W[E:2 * E], W[2 * E:]
        bq, bk, bv = b[:E], b[E:2 * E], b[2 * E:]
        wo, bo = g("proj.weight"), g("proj.bias")
    else:
        names = {"wq_wk_wv": ("W_q", "W_k", "W_v", "fc_out"),
                 "q_k_v_proj": ("q_proj", "k_proj", "v_proj", "out_proj")}[lay]
        wq, wk, wv, wo = [g(x + ".weight") for x in names]
        bq, bk, bv, bo = [g(x + ".bias") for x in names]
    assert wq.shape == (E, E) and wk.shape == (E, ex["kdim"]) and wv.shape == (E, ex["vdim"])
    assert (bo is not None) == ex["bias"]

    lin = lambda x, w, bb: x @ w.t() + (0 if bb is None else bb)
    x = io["query"].double()
    kin = io["key"].double() if "key" in io else x
    vin = io["value"].double() if "value" in io else x
    B, T, _ = x.shape
    S = kin.shape[1]
    D = E // H
    q = lin(x, wq, bq).view(B, T, H, D).permute(0, 2, 1, 3)
    k = lin(kin, wk, bk).view(B, S, H, D).permute(0, 2, 1, 3)
    v = lin(vin, wv, bv).view(B, S, H, D).permute(0, 2, 1, 3)
    logits = (q @ k.transpose(-1, -2)) / math.sqrt(D)  # [B,H,T,S]
    mask = torch.zeros(B, H, T, S, dtype=torch.float64)
    ninf = float("-inf")
    if "key_padding_mask" in io:
        m = io["key_padding_mask"]
        m = torch.where(m, ninf, 0.0).double() if m.dtype == torch.bool else m.double()
        mask = mask + m[:, None, None, :]
    if "attn_mask" in io:
        m = io["attn_mask"]
        m = torch.where(m, ninf, 0.0).double() if m.dtype == torch.bool else m.double()
        mask = mask + (m if m.dim() == 2 else m.view(B, H, T, S))
    if case["is_causal"]:
        for t in range(T):
            mask[:, :, t, t + 1:] = ninf
    logits = logits + mask
    if ex["add_bias_kv"]:
        # bias_k/bias_v are appended to the already-projected keys/values
        kb = g("bias_k").view(1, H, 1, D).expand(B, H, 1, D)
        vb = g("bias_v").view(1, H, 1, D).expand(B, H, 1, D)
        logits = torch.cat([logits, (q @ kb.transpose(-1, -2)) / math.sqrt(D)], dim=-1)
        v = torch.cat([v, vb], dim=2)
    if ex["add_zero_attn"]:
        assert cfg.get("add_zero_attn") is True
        logits = torch.cat([logits, torch.zeros(B, H, T, 1, dtype=torch.float64)], dim=-1)
        v = torch.cat([v, torch.zeros(B, H, 1, D, dtype=torch.float64)], dim=2)
    w = torch.softmax(logits, dim=-1)
    o = (w @ v).permute(0, 2, 1, 3).reshape(B, T, E)
    o = lin(o, wo, bo)
    ref = io["output"].double()
    err = ((o - ref).abs() / ref.abs().clamp(min=1.0)).max().item()
    assert err <= 2e-6, (name, err)
    if case["need_weights"]:
        ww = w.mean(dim=1) if case["average_attn_weights"] else w
        assert ww.shape == io["attn_weights"].shape, (name, ww.shape)
        errw = (ww - io["attn_weights"].double()).abs().max().item()
        assert errw <= 1e-6, (name, errw)
