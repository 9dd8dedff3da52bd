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
PyTorch 2.x mask rules (see README_TEXT below). Expected values are computed in
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

# ----------------------------------------------------------------------------
# safetensors writer / reader (hand-written, no library)
# ----------------------------------------------------------------------------

# dtype -> (safetensors name, integer view dtype used to get exact bits, struct code)
_ST_DTYPES = {
    torch.float32: ("F32", torch.int32, "i"),
    torch.float16: ("F16", torch.int16, "h"),
    torch.bfloat16: ("BF16", torch.int16, "h"),
    torch.bool: ("BOOL", torch.uint8, "B"),
    torch.int64: ("I64", torch.int64, "q"),
}
_ST_BY_NAME = {v[0]: (k, v[1], v[2]) for k, v in _ST_DTYPES.items()}


def tensor_bytes(t):
    """Raw little-endian row-major bytes of a tensor (exact bit patterns)."""
    name, int_dtype, code = _ST_DTYPES[t.dtype]
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bool:
        ints = t.to(torch.uint8).flatten().tolist()
    else:
        ints = t.view(int_dtype).flatten().tolist()
    return struct.pack("<%d%s" % (len(ints), code), *ints)


def safetensors_bytes(tensors, metadata=None, drop_tail_bytes=0):
    """Serialise {name: tensor} to safetensors bytes.

    Tensors are laid out in sorted-name order. The header is padded with
    spaces so that 8 + N is a multiple of 8. drop_tail_bytes truncates the data
    section (used only to build a deliberately broken file).
    """
    header = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name]
        raw = tensor_bytes(t)
        header[name] = {
            "dtype": _ST_DTYPES[t.dtype][0],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = dict(metadata) if metadata else {"format": "pt"}
    hjson = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    pad = (8 - (8 + len(hjson)) % 8) % 8
    hjson += b" " * pad
    data = b"".join(blobs)
    if drop_tail_bytes:
        data = data[: len(data) - drop_tail_bytes]
    return struct.pack("<Q", len(hjson)) + hjson + data


def write_safetensors(path, tensors, metadata=None):
    raw = safetensors_bytes(tensors, metadata)
    write_bytes(path, raw)
    # round-trip self-check of the writer
    back, _ = read_safetensors(path)
    assert sorted(back) == sorted(tensors), (path, sorted(back), sorted(tensors))
    for k, t in tensors.items():
        b = back[k]
        assert b.dtype == t.dtype and b.shape == t.shape, (path, k)
        assert torch.equal(b, t.detach().cpu()), (path, k)


def read_safetensors(path):
    """Minimal strict safetensors reader -> ({name: tensor}, metadata)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError("file too short")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError("header length past end of file")
    header = json.loads(raw[8 : 8 + n].decode("utf-8"))
    data = raw[8 + n :]
    meta = header.pop("__metadata__", None)
    out = {}
    spans = []
    for name, info in header.items():
        dtype, int_dtype, code = _ST_BY_NAME[info["dtype"]]
        shape = info["shape"]
        b, e = info["data_offsets"]
        if not (0 <= b <= e <= len(data)):
            raise ValueError("data_offsets out of range for %s" % name)
        numel = 1
        for d in shape:
            numel *= d
        itemsize = struct.calcsize("<" + code)
        if e - b != numel * itemsize:
            raise ValueError("byte size mismatch for %s" % name)
        ints = list(struct.unpack("<%d%s" % (numel, code), data[b:e]))
        if dtype == torch.bool:
            t = torch.tensor(ints, dtype=torch.uint8).to(torch.bool)
        else:
            t = torch.tensor(ints, dtype=int_dtype).view(dtype)
        out[name] = t.reshape(shape)
        spans.append((b, e))
    spans.sort()
    pos = 0
    for b, e in spans:
        if b != pos:
            raise ValueError("data section has holes/overlaps")
        pos = e
    if pos != len(data):
        raise ValueError("trailing bytes in data section")
    return out, meta


# ----------------------------------------------------------------------------
# file helpers
# ----------------------------------------------------------------------------


def write_bytes(path, raw):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(raw)


def write_json(path, obj):
    write_bytes(path, (json.dumps(obj, sort_keys=True, indent=2) + "\n").encode("utf-8"))


def write_text(path, text):
    write_bytes(path, text.encode("utf-8"))


def rmtree(path):
    if not os.path.isdir(path):
        return
    for root, dirs, files in os.walk(path, topdown=False):
        for fn in files:
            os.remove(os.path.join(root, fn))
        for d in dirs:
            p = os.path.join(root, d)
            if os.path.islink(p):
                os.remove(p)
            else:
                os.rmdir(p)
    os.rmdir(path)


def stable_seed(name):
    """Deterministic (not hash()-randomised) seed from a case name."""
    h = 0
    for ch in name.encode("utf-8"):
        h = (h * 131 + ch) % 2147483629
    return h


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


# ----------------------------------------------------------------------------
# bad weight files
# ----------------------------------------------------------------------------

BAD = [
    ("wrong_shape", "packed safetensors whose out_proj.weight is [16, 17] instead of [16, 16]",
     "shape error: out_proj.weight has shape [16, 17], expected [16, 16]"),
    ("missing_key", "packed safetensors without out_proj.weight",
     "missing tensor error: out_proj.weight not found"),
    ("heads_not_divisible", "valid E=16 packed safetensors, config.json num_heads=3",
     "config error: embed_dim 16 not divisible by num_heads 3"),
    ("no_num_heads", "valid E=16 packed safetensors, config.json is {}",
     "config error: num_heads missing from config.json"),
    ("not_weights", "model.safetensors holding the text \"this is not a weights file\\n\"",
     "safetensors parse error: header length (first 8 bytes read as u64) is larger than the file"),
    ("bad_safetensors_header", "valid u64 header length, header bytes start with '{' but are malformed JSON",
     "safetensors parse error: invalid JSON header"),
    ("offsets_out_of_range", "valid header, but the data section is truncated so out_proj.weight's "
     "data_offsets end past the end of the file",
     "safetensors parse error: data_offsets out of range / file truncated"),
]


def gen_bad(out):
    E, H = 16, 4
    torch.manual_seed(stable_seed("bad"))
    mha = make_mha(E, H)
    good = packed_state(mha)
    root = os.path.join(out, "bad")
    cfg = {"num_heads": H}

    def folder(n):
        return os.path.join(root, n)

    t = dict(good)
    t["out_proj.weight"] = torch.randn(E, E + 1) * 0.3
    write_safetensors(os.path.join(folder("wrong_shape"), "model.safetensors"), t)
    write_json(os.path.join(folder("wrong_shape"), "config.json"), cfg)

    t = dict(good)
    del t["out_proj.weight"]
    write_safetensors(os.path.join(folder("missing_key"), "model.safetensors"), t)
    write_json(os.path.join(folder("missing_key"), "config.json"), cfg)

    write_safetensors(os.path.join(folder("heads_not_divisible"), "model.safetensors"), good)
    write_json(os.path.join(folder("heads_not_divisible"), "config.json"), {"num_heads": 3})

    write_safetensors(os.path.join(folder("no_num_heads"), "model.safetensors"), good)
    write_json(os.path.join(folder("no_num_heads"), "config.json"), {})

    write_text(os.path.join(folder("not_weights"), "model.safetensors"),
               "this is not a weights file\n")
    write_json(os.path.join(folder("not_weights"), "config.json"), cfg)

    hdr = b'{"in_proj_weight": {"dtype": "F32", "shape": [48, 16], "data_offsets": [0, 3072]},,, '
    hdr += b" " * ((8 - (8 + len(hdr)) % 8) % 8)
    write_bytes(os.path.join(folder("bad_safetensors_header"), "model.safetensors"),
                struct.pack("<Q", len(hdr)) + hdr + b"\0" * 64)
    write_json(os.path.join(folder("bad_safetensors_header"), "config.json"), cfg)

    # sorted order: in_proj_bias, in_proj_weight, out_proj.bias, out_proj.weight (last)
    raw = safetensors_bytes(good, drop_tail_bytes=512)
    p = os.path.join(folder("offsets_out_of_range"), "model.safetensors")
    write_bytes(p, raw)
    write_json(os.path.join(folder("offsets_out_of_range"), "config.json"), cfg)

    # the reader must reject every bad safetensors-level file
    for n in ("not_weights", "bad_safetensors_header", "offsets_out_of_range"):
        try:
            read_safetensors(os.path.join(folder(n), "model.safetensors"))
        except (ValueError, UnicodeDecodeError):
            pass
        else:
            raise AssertionError("reader accepted bad file " + n)

    lines = ["# Bad weight files", "",
             "Generated by `tools/gen_fixtures.py`; each folder holds `model.safetensors` and",
             "`config.json` (`{\"num_heads\": 4}` unless said otherwise). Loading any of them must",
             "fail with a clear error, never crash. Valid weights are E=16, H=4, packed layout.", "",
             "| folder | what is wrong | expected error |", "|---|---|---|"]
    for n, what, err in BAD:
        lines.append("| `%s` | %s | %s |" % (n, what, err))
    write_text(os.path.join(root, "README.md"), "\n".join(lines) + "\n")


README_TEXT = """\
# Reference fixtures

Generated by `tools/gen_fixtures.py` -- do not edit by hand. Regenerate with

    /usr/bin/python3 tools/gen_fixtures.py --out tests/fixtures

(`/usr/bin/python3` is Debian's interpreter with python3-torch 1.13; the output is
byte-identical on rerun). `--check` re-validates the existing files without rewriting.

## Layout

* `cases/index.json` -- `{"cases": [...]}`, every case name in generation order.
* `cases/<name>/`
  * weights: `model.safetensors`, or `model.pt` (`torch.save(state_dict)` OrderedDict zip
    file, or a TorchScript module saved with `torch.jit.script(mha).save()`).
  * `config.json` -- `{"num_heads": H}`, plus `"add_zero_attn": true` when used, plus
    `"prefix"` when the attention weights sit inside a bigger checkpoint
    (`layers.1.self_attn.` with trailing dot, `layers.0.self_attn` without).
  * `io.safetensors` -- `query` [B,T,E] F32; optional `key` [B,S,kdim] / `value` [B,S,vdim]
    (absent = self-attention, key = value = query); optional `key_padding_mask` [B,S]
    (BOOL or F32); optional `attn_mask` [T,S] or [B*H,T,S] (BOOL or F32); expected
    `output` [B,T,E] F32; `attn_weights` F32 only when need_weights ([B,H,T,S'] per
    head or [B,T,S'] averaged, S' = S (+1 add_bias_kv) (+1 add_zero_attn)).
  * `case.json` -- name, description, weights_file, is_causal, need_weights,
    average_attn_weights and `expect` (embed_dim, num_heads, kdim, vdim, bias,
    add_bias_kv, add_zero_attn, format, layout, prefix) = what a loader must detect.
* `bad/<name>/` -- broken weight files for error tests, see `bad/README.md`.

Weight layouts (Linear weights are [out, in]):

* `packed`: `in_proj_weight` [3E,E], `in_proj_bias` [3E], `out_proj.weight`, `out_proj.bias`
  (+ `bias_k`, `bias_v` [1,1,E] with add_bias_kv).
* `separate_proj`: `q_proj_weight` [E,E], `k_proj_weight` [E,kdim], `v_proj_weight` [E,vdim],
  `in_proj_bias`, `out_proj.*` (kdim/vdim != E).
* `fused_qkv`: `qkv.weight` [3E,E], `qkv.bias`, `proj.weight`, `proj.bias`.
* `wq_wk_wv`: `W_q|W_k|W_v|fc_out` `.weight/.bias`.
* `q_k_v_proj`: `q_proj|k_proj|v_proj|out_proj` `.weight/.bias` (Hugging Face style).

## Reference semantics

Expected values are those of `torch.nn.MultiheadAttention(batch_first=True)` in eval
mode (dropout 0) with PyTorch 2.x mask semantics, computed in float64 through
`torch.nn.functional.multi_head_attention_forward` (the slow path) and stored as F32.
All parameters (biases, bias_k/bias_v included) are randn * 0.3; inputs are randn.

Masks are merged by the generator into one additive float mask [B*H, T, S]:

* bool masks: True = masked = -inf, False = 0; float masks are added as they are.
* `key_padding_mask` [B,S] is broadcast to every head and query row.
* `attn_mask` [T,S] is broadcast over B*H; [B*H,T,S] is used per (batch*head)
  (index b*H + h).
* `is_causal`: `triu(ones(T,S), diagonal=1)` masked (-inf), top-left aligned, also
  for T != S cross-attention.
* every present mask is made additive and they are SUMMED.
* with add_bias_kv / add_zero_attn the extra key columns are never masked (the mask
  is padded with zero columns).

No query row ever has all of its keys masked. Cases with no mask, bias and kdim = vdim = E
are also checked against the module's own float32 forward (|diff| <= 1e-5 * max(1, |ref|)).
"""


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
    gen_cases(args.out)
    gen_bad(args.out)
    write_text(os.path.join(args.out, "README.md"), README_TEXT)
    check(args.out)
    print("module float32 forward self-check passed on %d cases: %s"
          % (len(SELF_CHECKED), " ".join(SELF_CHECKED)))
    print("wrote %d cases + %d bad files to %s" % (len(CASES), len(BAD), args.out))


if __name__ == "__main__":
    main()
