"""Head-option and head-analysis references for mha-serve (docs/heads.md), written into
tests/fixtures/heads/ by tools/gen_fixtures.py (Debian's /usr/bin/python3 with python3-torch).

* Forward references: a float64 attention written out step by step (projection, split_heads,
  softmax(QK^T/sqrt(d) + mask), head_mask, @V, combine_heads, W^O) on the weights and inputs of an
  existing fixture case. Without head_mask it must equal the case's stored PyTorch output
  (F.multi_head_attention_forward) to 2e-6, which ties it to PyTorch; head_mask follows Hugging
  Face (attention_probs = attention_probs * head_mask, before @V; returned weights are the masked
  ones). Every weights selection is a slice of these dense per-head weights; top-k values are the
  first k of a descending sort; head statistics are torch.special.entr(p).sum(-1) and p.max(-1) of
  each head's softmax distribution (before head_mask).
* Analysis references: seed 001's OutputProjectionAnalyzer, copied as written (without its
  matplotlib import), run in float64 on W^O = out_proj.weight^T and on W^Q, W^K, W^V.

heads/index.json lists the cases; heads/<name>.json holds the requests (options and the names of
the expected tensors) and heads/<name>.safetensors the tensors (head_mask inputs, expected F32,
top-k indices I64); heads/analysis.json the analyses, per model case.
"""

import json
import math
import os

import torch

# ----------------------------------------------------------------------------
# seed 001 (shared/seeds/001_68f662e3f58eb4e8.txt), class OutputProjectionAnalyzer, as written
# ----------------------------------------------------------------------------


class OutputProjectionAnalyzer:
    def __init__(self, W_O, num_heads, d_v):
        self.W_O = W_O
        self.num_heads = num_heads
        self.d_v = d_v
        self.d_model = W_O.shape[1]
        self.W_O_per_head = self._partition_by_head()

    def _partition_by_head(self):
        return [self.W_O[i * self.d_v: (i + 1) * self.d_v, :] for i in range(self.num_heads)]

    def compute_head_importance(self):
        importance = torch.tensor([torch.norm(W_i, p='fro').item() for W_i in self.W_O_per_head])
        return importance / importance.sum()

    def compute_head_correlation(self):
        correlations = torch.zeros(self.num_heads, self.num_heads)
        for i in range(self.num_heads):
            for j in range(self.num_heads):
                W_i_flat = self.W_O_per_head[i].flatten()
                W_j_flat = self.W_O_per_head[j].flatten()
                W_i_centered = W_i_flat - W_i_flat.mean()
                W_j_centered = W_j_flat - W_j_flat.mean()
                corr = (W_i_centered @ W_j_centered) / (
                    W_i_centered.norm() * W_j_centered.norm() + 1e-8)
                correlations[i, j] = corr
        return correlations

    def compute_output_dim_head_contribution(self):
        contributions = torch.zeros(self.d_model, self.num_heads)
        for out_dim in range(self.d_model):
            for head_idx in range(self.num_heads):
                weights = self.W_O_per_head[head_idx][:, out_dim]
                contributions[out_dim, head_idx] = weights.norm()
        row_sums = contributions.sum(dim=1, keepdim=True) + 1e-8
        return contributions / row_sums

    def analyze_effective_rank(self):
        def effective_rank(matrix):
            U, S, V = torch.svd(matrix)
            S_normalized = S / S.sum()
            S_normalized = S_normalized[S_normalized > 1e-10]
            entropy = -(S_normalized * torch.log(S_normalized + 1e-10)).sum()
            return torch.exp(entropy).item()

        return {
            'full_W_O': effective_rank(self.W_O),
            'per_head': [effective_rank(W_i) for W_i in self.W_O_per_head],
            'max_possible': min(self.num_heads * self.d_v, self.d_model)
        }


def projection_reference(matrix, H):
    """The seed's analysis of `matrix` split into H row blocks (float64 throughout)."""
    d = matrix.shape[0] // H
    a = OutputProjectionAnalyzer(matrix, H, d)
    ranks = a.analyze_effective_rank()
    return {
        "head_importance": a.compute_head_importance().tolist(),
        "head_correlation": a.compute_head_correlation().flatten().tolist(),
        "effective_rank": ranks["full_W_O"],
        "max_rank": min(matrix.shape[0], matrix.shape[1]),
        "head_effective_rank": ranks["per_head"],
        "head_max_rank": min(d, matrix.shape[1]),
    }, a


def analysis_reference(params, H):
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # the seed's torch.tensor / torch.zeros: float64
    try:
        W_O = params["wo"].t().contiguous()  # [H*d_v, E]: concat(heads) @ W^O
        out, analyzer = projection_reference(W_O, H)
        result = {
            "output_projection": out,
            "output_dim_contribution":
                analyzer.compute_output_dim_head_contribution().flatten().tolist(),
        }
        for key, name in (("wq", "query_projection"), ("wk", "key_projection"),
                          ("wv", "value_projection")):
            result[name] = projection_reference(params[key], H)[0]
        return result
    finally:
        torch.set_default_dtype(old)


# ----------------------------------------------------------------------------
# forward reference with head_mask and per-head probabilities
# ----------------------------------------------------------------------------


def case_params(sd, E):
    """float64 q/k/v/o weights and biases of a packed or separate_proj state dict."""
    g = lambda k: sd[k].to(torch.float64) if k in sd else None
    if "in_proj_weight" in sd:
        W = g("in_proj_weight")
        wq, wk, wv = W[:E], W[E:2 * E], W[2 * E:]
    else:
        wq, wk, wv = g("q_proj_weight"), g("k_proj_weight"), g("v_proj_weight")
    b = g("in_proj_bias")
    bq, bk, bv = (None, None, None) if b is None else (b[:E], b[E:2 * E], b[2 * E:])
    return {"wq": wq, "wk": wk, "wv": wv, "bq": bq, "bk": bk, "bv": bv,
            "wo": g("out_proj.weight"), "bo": g("out_proj.bias"),
            "bias_k": g("bias_k"), "bias_v": g("bias_v")}


def attention(p, meta, io, H, add_zero_attn, head_mask=None):
    """Returns (output [B,T,E], probs [B,H,T,S'] before head_mask, weights after head_mask)."""
    lin = lambda x, w, b: x @ w.t() + (0 if b is None else b)
    x = io["query"].double()
    kin = io["key"].double() if "key" in io else x
    vin = io["value"].double() if "value" in io else x
    B, T, E = x.shape
    S, D = kin.shape[1], E // H
    split = lambda t, L: t.view(B, L, H, D).permute(0, 2, 1, 3)  # split_heads
    q, k, v = split(lin(x, p["wq"], p["bq"]), T), split(lin(kin, p["wk"], p["bk"]), S), \
        split(lin(vin, p["wv"], p["bv"]), S)
    if p["bias_k"] is not None:
        k = torch.cat([k, p["bias_k"].view(1, H, 1, D).expand(B, H, 1, D)], dim=2)
        v = torch.cat([v, p["bias_v"].view(1, H, 1, D).expand(B, H, 1, D)], dim=2)
    if add_zero_attn:
        k = torch.cat([k, torch.zeros(B, H, 1, D, dtype=torch.float64)], dim=2)
        v = torch.cat([v, torch.zeros(B, H, 1, D, dtype=torch.float64)], dim=2)
    S2 = k.shape[2]
    mask = torch.zeros(B, H, T, S2, dtype=torch.float64)
    additive = lambda m: torch.where(m, float("-inf"), 0.0).double() if m.dtype == torch.bool \
        else m.double()
    if "key_padding_mask" in io:
        mask[..., :S] += additive(io["key_padding_mask"])[:, None, None, :]
    if "attn_mask" in io:
        m = additive(io["attn_mask"])
        mask[..., :S] += m if m.dim() == 2 else m.view(B, H, T, S)
    if meta["is_causal"]:
        mask[..., :S] += additive(torch.triu(torch.ones(T, S, dtype=torch.bool), 1))
    probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D) + mask, dim=-1)
    weights = probs
    if head_mask is not None:
        hm = head_mask.double()
        weights = probs * (hm.view(1, H, 1, 1) if hm.dim() == 1 else hm.view(B, H, 1, 1))
    o = (weights @ v).permute(0, 2, 1, 3).reshape(B, T, E)  # combine_heads
    return lin(o, p["wo"], p["bo"]), probs, weights


def select(weights, opts, H):
    """Slice the dense per-head weights as the request asks (rows, heads, average, top-k)."""
    T = weights.shape[2]
    w = weights[:, :, opts.get("weights_query_begin", 0):opts.get("weights_query_end", T)]
    heads = opts.get("weights_heads", [])
    if heads:
        w = w[:, heads]
    average = opts.get("average_attn_weights", not heads)
    if average:
        w = w.sum(dim=1) / w.shape[1]
    k = opts.get("weights_top_k", 0)
    if k > 0:
        values = torch.sort(w, dim=-1, descending=True).values[..., :k]
        return {"attn_weights_topk_values": values,
                "attn_weights_topk_indices": torch.topk(w, k, dim=-1).indices}
    return {"attn_weights": w}


# (request id, options); head_mask values are filled in per case: "hm1" = [H], "hm2" = [B, H].
REQUESTS = [
    ("heads_2_0", {"need_weights": True, "weights_heads": [2, 0]}),
    ("last_row", {"need_weights": True, "average_attn_weights": False,
                  "weights_query_begin": -1}),
    ("topk3", {"need_weights": True, "average_attn_weights": False, "weights_top_k": 3}),
    ("topk2_heads_rows_i64", {"need_weights": True, "weights_heads": [3, 1],
                              "weights_query_begin": 1, "weights_query_end": 3,
                              "weights_top_k": 2, "weights_topk_indices_dtype": "INT64"}),
    ("avg_heads01_topk2", {"need_weights": True, "weights_heads": [0, 1],
                           "average_attn_weights": True, "weights_top_k": 2}),
    ("avg_rows_topk_all", {"need_weights": True, "weights_query_end": 2, "weights_top_k": -1}),
    ("fp16_head3", {"need_weights": True, "weights_heads": [3], "weights_dtype": "FLOAT16"}),
    ("stats", {"head_stats": True}),
    ("stats_head1_top1", {"head_stats": True, "need_weights": True, "weights_heads": [1],
                          "weights_top_k": 1}),
    ("mask_h", {"head_mask": "hm1", "need_weights": True, "average_attn_weights": False}),
    ("mask_bh_stats_avg_rows", {"head_mask": "hm2", "head_stats": True, "need_weights": True,
                                "weights_query_begin": 1}),
    ("mask_h_no_weights", {"head_mask": "hm1"}),
]

CASES = ["self_basic", "cross_attention", "bias_kv_zero_attn_kpm", "causal_kpm"]
ANALYSIS_CASES = ["self_basic", "kdim_vdim", "add_bias_kv"]


def resolve(opts, T, S2):
    """Request options with the placeholders made concrete for this case (-1 = last / all)."""
    o = dict(opts)
    if o.get("weights_query_begin") == -1:
        o["weights_query_begin"] = T - 1
    if o.get("weights_top_k") == -1:
        o["weights_top_k"] = S2
    return o


def gen_case(out, name, helpers, H, B):
    d = os.path.join(out, "cases", name)
    with open(os.path.join(d, "case.json")) as f:
        meta = json.load(f)
    sd, _ = helpers.read_safetensors(os.path.join(d, "model.safetensors"))
    io, _ = helpers.read_safetensors(os.path.join(d, "io.safetensors"))
    ex = meta["expect"]
    p = case_params(sd, ex["embed_dim"])
    ref_out, probs, _ = attention(p, meta, io, H, ex["add_zero_attn"])
    err = (ref_out - io["output"].double()).abs().max().item()
    assert err <= 2e-6, (name, "step-by-step reference disagrees with PyTorch's", err)
    gen = torch.Generator().manual_seed(len(name))
    masks = {"hm1": torch.tensor([1.0, 0.0, 0.5, 2.0])[:H],
             "hm2": (torch.rand(B, H, generator=gen) * 1.5).round(decimals=1)}
    masks["hm2"][0, 1] = 0.0
    tensors, requests = {}, []
    T, S2 = probs.shape[2], probs.shape[3]
    for rid, opts in REQUESTS:
        o = resolve(opts, T, S2)
        hm = masks.get(o.get("head_mask"))
        out_t, pr, weights = attention(p, meta, io, H, ex["add_zero_attn"], hm)
        expect = {}
        if hm is not None:
            o["head_mask"] = rid + "/head_mask"
            tensors[o["head_mask"]] = hm.to(torch.float32)
        expect["output"] = out_t
        if o.get("need_weights"):
            expect.update(select(weights, o, H))
        if o.get("head_stats"):
            expect["head_entropy"] = torch.special.entr(pr).sum(dim=-1)
            expect["head_max_weight"] = pr.max(dim=-1).values
        for field, t in expect.items():
            tensors[rid + "/" + field] = t if t.dtype == torch.int64 else t.to(torch.float32)
        requests.append({"id": rid, "options": o, "expect": sorted(expect)})
    helpers.write_safetensors(os.path.join(out, "heads", name + ".safetensors"), tensors)
    helpers.write_json(os.path.join(out, "heads", name + ".json"),
                       {"name": name, "model_case": name, "requests": requests})


def gen_head_fixtures(out, helpers):
    """Writes tests/fixtures/heads/ from the cases already written under out/cases."""
    os.makedirs(os.path.join(out, "heads"), exist_ok=True)
    for name in CASES:
        with open(os.path.join(out, "cases", name, "case.json")) as f:
            meta = json.load(f)
        io, _ = helpers.read_safetensors(os.path.join(out, "cases", name, "io.safetensors"))
        gen_case(out, name, helpers, meta["expect"]["num_heads"], io["query"].shape[0])
    analyses = {}
    for name in ANALYSIS_CASES:
        d = os.path.join(out, "cases", name)
        with open(os.path.join(d, "case.json")) as f:
            ex = json.load(f)["expect"]
        sd, _ = helpers.read_safetensors(os.path.join(d, "model.safetensors"))
        analyses[name] = analysis_reference(case_params(sd, ex["embed_dim"]), ex["num_heads"])
    helpers.write_json(os.path.join(out, "heads", "analysis.json"), analyses)
    helpers.write_json(os.path.join(out, "heads", "index.json"), {"cases": CASES})
    return len(CASES), len(REQUESTS)
