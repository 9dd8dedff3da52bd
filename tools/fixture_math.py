#!/usr/bin/python3
"""Fixture models and the float64 reference forward; the weight layouts (part of tools/gen_fixtures.py; run that)."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# ----------------------------------------------------------------------------
# model construction and reference computation
# ----------------------------------------------------------------------------


def reinit_(module, scale=0.3):
    """Re-initialise every parameter with randn * scale (in named_parameters order)."""
    with torch.no_grad():
        for _, p in module.named_parameters():
            p.copy_(torch.randn(p.shape) * scale)
    return module


def make_mha(E, H, bias=True, add_bias_kv=False, add_zero_attn=False, kdim=None, vdim=None):
    m = nn.MultiheadAttention(
        E, H, dropout=0.0, bias=bias, add_bias_kv=add_bias_kv,
        add_zero_attn=add_zero_attn, kdim=kdim, vdim=vdim, batch_first=True)
    # 0.3 at E=16, scaled by 1/sqrt(E) beyond, so outputs stay O(1) at any width and an absolute
    # fp32 tolerance of 1e-5 means the same thing for every case.
    reinit_(m, 0.3 * math.sqrt(16 / E))
    return m.eval()


def rand_bool_mask(shape, p=0.4):
    """Random bool mask (True = masked) with >= 1 unmasked entry in each last-dim row."""
    m = torch.rand(shape) < p
    rows = m.reshape(-1, shape[-1])
    keep = torch.randint(0, shape[-1], (rows.shape[0],))
    rows[torch.arange(rows.shape[0]), keep] = False
    return rows.reshape(shape)


def to_additive(mask):
    """bool -> 0 / -inf (True = masked); float -> as is. Returns float64."""
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=torch.float64).masked_fill(mask, float("-inf"))
    return mask.to(torch.float64)


def merged_mask(B, H, T, S, key_padding_mask, attn_mask, is_causal):
    """PyTorch 2.x semantics: every present mask made additive, then summed.

    Returns a float64 [B*H, T, S] tensor, or None when no mask is present.
    """
    total = None

    def add(x):
        nonlocal total
        total = x if total is None else total + x

    if key_padding_mask is not None:
        assert tuple(key_padding_mask.shape) == (B, S)
        kpm = to_additive(key_padding_mask)
        add(kpm.view(B, 1, 1, S).expand(B, H, T, S).reshape(B * H, T, S))
    if attn_mask is not None:
        am = to_additive(attn_mask)
        if am.dim() == 2:
            assert tuple(am.shape) == (T, S)
            am = am.unsqueeze(0).expand(B * H, T, S)
        else:
            assert tuple(am.shape) == (B * H, T, S)
        add(am)
    if is_causal:
        causal = torch.triu(torch.ones(T, S, dtype=torch.bool), diagonal=1)
        add(to_additive(causal).unsqueeze(0).expand(B * H, T, S))
    if total is not None:
        total = total.contiguous()
        # no query row may have every (original) key masked
        assert bool(torch.isfinite(total).any(dim=-1).all()), "fully masked query row"
    return total


def reference_forward(mha, query, key, value, key_padding_mask=None, attn_mask=None,
                      is_causal=False, average_attn_weights=True):
    """float64 slow-path reference. Inputs are batch-first. Returns (out, weights)."""
    E, H = mha.embed_dim, mha.num_heads
    B, T, _ = query.shape
    S = key.shape[1]
    P = {n: p.detach().to(torch.float64) for n, p in mha.named_parameters()}
    mask = merged_mask(B, H, T, S, key_padding_mask, attn_mask, is_causal)
    q = query.to(torch.float64).transpose(0, 1)
    k = key.to(torch.float64).transpose(0, 1)
    v = value.to(torch.float64).transpose(0, 1)
    separate = not mha._qkv_same_embed_dim
    out, w = F.multi_head_attention_forward(
        q, k, v, E, H,
        None if separate else P["in_proj_weight"],
        P.get("in_proj_bias"),
        P.get("bias_k"), P.get("bias_v"),
        mha.add_zero_attn, 0.0,
        P["out_proj.weight"], P.get("out_proj.bias"),
        training=False,
        key_padding_mask=None,
        need_weights=True,
        attn_mask=mask,
        use_separate_proj_weight=separate,
        q_proj_weight=P.get("q_proj_weight"),
        k_proj_weight=P.get("k_proj_weight"),
        v_proj_weight=P.get("v_proj_weight"),
        average_attn_weights=average_attn_weights)
    out = out.transpose(0, 1).contiguous()
    assert bool(torch.isfinite(out).all()) and bool(torch.isfinite(w).all())
    return out, w


def module_self_check(mha, query, key, value, ref_out, ref_w, need_weights, average):
    """The module's own float32 forward must agree with the float64 reference."""
    with torch.no_grad():
        out, w = mha(query, key, value, need_weights=need_weights,
                     average_attn_weights=average)
    # 1e-5 absolute, relative to max(1, |reference|) (E=64 outputs reach ~10)
    d = ((out.double() - ref_out).abs() / ref_out.abs().clamp(min=1.0)).max().item()
    assert d <= 1e-5, "module forward disagrees with reference: %g" % d
    if need_weights:
        dw = (w.double() - ref_w).abs().max().item()
        assert dw <= 1e-5, "module weights disagree with reference: %g" % dw
    return d


# ----------------------------------------------------------------------------
# weight layouts
# ----------------------------------------------------------------------------


def packed_state(mha):
    """nn.MultiheadAttention's own state_dict tensors (packed or separate_proj)."""
    return {k: v.detach().clone() for k, v in mha.state_dict().items()}


def split_qkv(mha):
    E = mha.embed_dim
    W = mha.in_proj_weight.detach()
    b = mha.in_proj_bias.detach()
    return ([W[i * E:(i + 1) * E].clone() for i in range(3)],
            [b[i * E:(i + 1) * E].clone() for i in range(3)])


class FusedQKV(nn.Module):
    def __init__(self, E):
        super().__init__()
        self.qkv = nn.Linear(E, 3 * E)
        self.proj = nn.Linear(E, E)


def layout_tensors(mha, layout):
    o_w = mha.out_proj.weight.detach().clone()
    o_b = mha.out_proj.bias.detach().clone()
    if layout == "wq_wk_wv":
        (wq, wk, wv), (bq, bk, bv) = split_qkv(mha)
        return {"W_q.weight": wq, "W_q.bias": bq, "W_k.weight": wk, "W_k.bias": bk,
                "W_v.weight": wv, "W_v.bias": bv, "fc_out.weight": o_w, "fc_out.bias": o_b}
    if layout == "q_k_v_proj":
        (wq, wk, wv), (bq, bk, bv) = split_qkv(mha)
        return {"q_proj.weight": wq, "q_proj.bias": bq, "k_proj.weight": wk, "k_proj.bias": bk,
                "v_proj.weight": wv, "v_proj.bias": bv, "out_proj.weight": o_w, "out_proj.bias": o_b}
    raise ValueError(layout)
