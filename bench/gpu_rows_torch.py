#!/usr/bin/env python3
"""PyTorch's side of bench/gpu_rows.py's rows, in the device's own torch (2.x on a GPU; Debian's
1.13 on the CPU for a dry run): prints one JSON object.

  gpu_rows_torch.py sdpa --shape T,E,H --dtype bfloat16 --device cuda [--passes 3]
      long sequences: causal self-attention of one sequence, no weights. sdpa_ms: SDPA alone on q, k, v
      [1, H, T, D] already on the device; layer_ms: the layer around it (one in-projection GEMM,
      SDPA, the out-projection) from a query on the device; layer_host_ms: the same from a query
      on the host and back (the least a server does, without the wire). Medians, each pass
      synchronized; torch without SDPA (1.13) computes softmax(q k^T / sqrt(D) + causal) v.
  gpu_rows_torch.py llamastep --shape N,CACHE,E,H,KV --dtype float16 --device cuda
      the Llama step: one Llama layer step of N sessions x 1 token over caches of CACHE tokens (RoPE
      left out: elementwise): the q/k/v projection as one GEMM, the new K/V row written into the
      caches, grouped-query attention (SDPA's enable_gqa where torch has it, else two batched
      matmuls over the KV groups), o_proj. step_us from rows on the device, step_host_us from
      rows on the host and back; roofline_us = every byte of K/V and weights read once at the
      device's copy rate (a copy of 1 GiB, bytes read + written per second, measured here).
"""
import argparse, json, math, os, statistics, sys, time

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
p.add_argument("what", choices=["sdpa", "llamastep"])
p.add_argument("--shape", required=True)
p.add_argument("--dtype", default="float16")
p.add_argument("--device", default="cuda")
p.add_argument("--passes", type=int, default=3)
a = p.parse_args()
dev = torch.device(a.device)
dt = getattr(torch, a.dtype)
if dev.type == "cpu" and dt == torch.float16:
    dt = torch.float32  # no float16 GEMM in LibTorch 1.13's CPU build (the core computes in fp32)
shape = [int(x) for x in a.shape.split(",")]
res = {"what": a.what, "torch": torch.__version__, "device": str(dev), "dtype": str(dt)}
if dev.type == "cuda":
    res["card"] = torch.cuda.get_device_name(dev)


def sync():
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def median_ms(fn, passes):
    fn()
    sync()
    times = []
    for _ in range(passes):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


def causal_attention(q, k, v):
    if HAS_SDPA:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    t = q.shape[-2]
    mask = torch.full((t, t), float("-inf"), device=q.device, dtype=q.dtype).triu(1)
    return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + mask, -1) @ v


def sdpa():
    t, e, h = shape
    d = e // h
    torch.manual_seed(47)  # made where they are used: randn of 10^8 values on a host takes seconds
    w_in = torch.randn(3 * e, e, device=dev, dtype=dt) * e ** -0.5
    w_out = torch.randn(e, e, device=dev, dtype=dt) * e ** -0.5
    x = torch.randn(1, t, e, device=dev, dtype=dt)
    x_host = x.cpu()

    def layer(x):
        q, k, v = F.linear(x, w_in).view(1, t, 3, h, d).permute(2, 0, 3, 1, 4).unbind(0)
        o = causal_attention(q, k, v)
        return F.linear(o.transpose(1, 2).reshape(1, t, e), w_out)

    with torch.inference_mode():
        q, k, v = (torch.randn(1, h, t, d, device=dev, dtype=dt) for _ in range(3))
        res["sdpa_ms"] = median_ms(lambda: causal_attention(q, k, v), a.passes)
        del q, k, v
        res["layer_ms"] = median_ms(lambda: layer(x), a.passes)
        res["layer_host_ms"] = median_ms(lambda: layer(x_host.to(dev)).cpu(), a.passes)
    res["sdpa"] = "scaled_dot_product_attention" if HAS_SDPA else "math (no SDPA in this torch)"
    if HAS_SDPA and dev.type == "cuda":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        try:
            from torch_gpu_reference import sdpa_backend  # noqa: E402
            with torch.inference_mode():
                q = torch.randn(1, h, min(t, 4096), d, device=dev, dtype=dt)
                res["sdpa_backend"] = sdpa_backend(q, q, q)
        except Exception as e:  # the timings stand without it
            res["sdpa_backend"] = f"unknown: {e}"
    res["flops"] = 8.0 * t * e * e + 2.0 * t * t * e  # causal: half the square of q k^T and p v
    res["layer_tflops"] = res["flops"] / res["layer_ms"] / 1e9


def copy_gbps():
    n = (1 << 30) if dev.type == "cuda" else (64 << 20)
    src = torch.empty(n, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), 5)
    return 2 * n / ms / 1e6  # bytes read + written per second, GB/s


def llamastep():
    n, cache, e, h, kv = shape
    d, grp = e // h, h // kv
    torch.manual_seed(46)  # made on the device: 2 x 5 * 10^8 cached values
    w_qkv = torch.randn((h + 2 * kv) * d, e, device=dev, dtype=dt) * e ** -0.5
    w_o = torch.randn(e, h * d, device=dev, dtype=dt) * (h * d) ** -0.5
    k_cache = torch.randn(n, kv, cache + 1, d, device=dev, dtype=dt)
    v_cache = torch.randn(n, kv, cache + 1, d, device=dev, dtype=dt)
    x = torch.randn(n, e, device=dev, dtype=dt)
    x_host = x.cpu()
    gqa = HAS_SDPA and tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 5)

    def step(x):
        q, k, v = F.linear(x, w_qkv).split([h * d, kv * d, kv * d], -1)
        k_cache[:, :, cache] = k.view(n, kv, d)  # the new token's row (the append)
        v_cache[:, :, cache] = v.view(n, kv, d)
        if gqa:
            o = F.scaled_dot_product_attention(q.view(n, h, 1, d), k_cache, v_cache,
                                               enable_gqa=True)
        else:
            s = q.view(n, kv, grp, d) @ k_cache.transpose(-1, -2) / math.sqrt(d)
            o = torch.softmax(s.float(), -1).to(dt) @ v_cache
        return F.linear(o.reshape(n, h * d), w_o)

    with torch.inference_mode():
        res["step_us"] = median_ms(lambda: step(x), 20) * 1e3
        res["step_host_us"] = median_ms(lambda: step(x_host.to(dev)).cpu(), 20) * 1e3
    elt = torch.tensor([], dtype=dt).element_size()
    res["attention"] = "sdpa enable_gqa" if gqa else "matmul over the KV groups"
    res["bytes_read"] = (2 * n * kv * (cache + 1) * d + w_qkv.numel() + w_o.numel()) * elt
    res["copy_gbps"] = copy_gbps()
    res["roofline_us"] = res["bytes_read"] / (res["copy_gbps"] * 1e3)


{"sdpa": sdpa, "llamastep": llamastep}[a.what]()
print(json.dumps(res))
