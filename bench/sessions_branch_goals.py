#!/usr/bin/python3
"""The branching sessions' goal table (docs/sessions.md, "Fork, truncate and spill"): one run of each figure
against a running mha-server serving its built-in model (E=512 H=8 fp32, blocks of 16 tokens).

    sessions_branch_goals.py GRPC_PORT METRICS_PORT fork|fork64|speculate|spill [SESSIONS]

fork and speculate need --max-sequence-length 8192 and --max-work-bytes 4294967296 (a 4096-token
session, 256-token prefill chunks); spill needs --kv-cache-bytes 4194304 --kv-cache-full-policy
spill (SESSIONS = 160: ten times the 16 sessions of 64 tokens the pool holds). The Python stubs:
client/python/gen_stubs.sh, or those the python_client_example test generates (STUBS below).
"""
import os, re, statistics, sys, time, urllib.request
import numpy as np, grpc
sys.path.insert(0, os.environ.get("STUBS", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                      "../build/tests/service/python_example/stubs")))
from mha.v1 import attention_pb2 as pb, attention_pb2_grpc as rpc

port, mport, part = sys.argv[1], sys.argv[2], sys.argv[3]
stub = rpc.AttentionServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}",
                                options=[("grpc.max_receive_message_length", -1)]))
E = 512
rng = np.random.default_rng(0)

def tensor(a):
    a = np.ascontiguousarray(a, dtype=np.float32)
    return pb.Tensor(dtype=pb.FLOAT32, shape=a.shape, data=a.tobytes())

def metric(name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics").read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.split()[-1])
    return total

def step(sid, t):
    return stub.Forward(pb.ForwardRequest(session_id=sid, query=tensor(rng.standard_normal((1, t, E)))))

def open_prefill(n, max_tokens):
    s = stub.OpenSession(pb.OpenSessionRequest(batch_size=1, max_tokens=max_tokens)).session_id
    done = 0
    while done < n:
        c = min(256, n - done); step(s, c); done += c
    return s

def rtt_baseline():
    ts = []
    for _ in range(50):
        t0 = time.perf_counter()
        try: stub.TruncateSession(pb.TruncateSessionRequest(session_id="s-none", tokens=0))
        except grpc.RpcError: pass
        ts.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(ts)

if part == "fork":
    s = open_prefill(4096, 4200)
    base = rtt_baseline()
    used0 = metric("mha_kv_cache_blocks_used")
    lat, forks = [], []
    for _ in range(20):
        t0 = time.perf_counter()
        f = stub.ForkSession(pb.ForkSessionRequest(session_id=s))
        lat.append((time.perf_counter() - t0) * 1e6)
        forks.append(f.session_id)
    used1 = metric("mha_kv_cache_blocks_used")
    step(forks[0], 1)
    used2 = metric("mha_kv_cache_blocks_used")
    print(f"fork of a 4096-token session: round trip p50 {statistics.median(lat):.0f} us "
          f"(min {min(lat):.0f}); a NOT_FOUND TruncateSession round trip p50 {base:.0f} us; "
          f"blocks used {used0:.0f} -> after 20 forks {used1:.0f} -> after one fork's first step {used2:.0f}; "
          f"fork kv_blocks {f.kv_blocks} shared {f.kv_shared_blocks}")
    for x in forks + [s]: stub.CloseSession(pb.CloseSessionRequest(session_id=x))
elif part == "fork64":
    s = open_prefill(2048, 2048 + 32)
    forks = [stub.ForkSession(pb.ForkSessionRequest(session_id=s)).session_id for _ in range(64)]
    for i in range(32):
        for f in forks: step(f, 1)
    held = metric("mha_kv_cache_bytes_used")
    block_bytes = 16 * 2 * E * 4
    indep = 64 * -(-(2048 + 32) // 16) * block_bytes
    print(f"64 forks of a 2048-token prefix x 32 steps: KV bytes held {held:.0f} "
          f"(source included) vs 64 independent sessions {indep} = {held / indep:.4f}x; "
          f"copies on write {metric('mha_kv_cache_copies_on_write_total'):.0f}")
    for x in forks + [s]: stub.CloseSession(pb.CloseSessionRequest(session_id=x))
elif part == "speculate":
    s = open_prefill(256, 256 + 256 * 4 + 256 * 4 + 300)
    m = statistics.median
    def plain(t):
        rt, sc = [], []
        for _ in range(256):
            t0 = time.perf_counter(); r = step(s, t); rt.append((time.perf_counter() - t0) * 1e6)
            sc.append(r.compute_us + r.queue_us)
        return m(rt), m(sc)
    p1, p1c = plain(1)
    stub.TruncateSession(pb.TruncateSessionRequest(session_id=s, tokens=256))
    p4, p4c = plain(4)
    stub.TruncateSession(pb.TruncateSessionRequest(session_id=s, tokens=256))
    rounds, steps, truncs, round_c = [], [], [], []
    for _ in range(256):
        t0 = time.perf_counter()
        r = step(s, 4)
        t1 = time.perf_counter()
        stub.TruncateSession(pb.TruncateSessionRequest(session_id=s, tokens=r.session_tokens - 2))
        t2 = time.perf_counter()
        rounds.append((t2 - t0) * 1e6); steps.append((t1 - t0) * 1e6); truncs.append((t2 - t1) * 1e6)
        round_c.append(r.compute_us + r.queue_us)
    print(f"speculative (append 4, truncate 2) x 256: round p50 {m(rounds):.0f} us (step of 4 "
          f"{m(steps):.0f} + truncate {m(truncs):.0f}); plain step of 1 token {p1:.0f} us "
          f"(server {p1c:.0f}), of 4 tokens {p4:.0f} us (server {p4c:.0f}); round / plain 1-token "
          f"step = {m(rounds) / p1:.2f}x, round / plain 4-token step = {m(rounds) / p4:.2f}x; "
          f"round's step server {m(round_c):.0f} us")
    stub.CloseSession(pb.CloseSessionRequest(session_id=s))
elif part == "spill":
    n = int(sys.argv[4])
    ids = [stub.OpenSession(pb.OpenSessionRequest(batch_size=1, max_tokens=64)).session_id
           for _ in range(n)]
    failed = 0
    t0 = time.perf_counter()
    for p in range(64):
        for sid in ids:
            try: step(sid, 1)
            except grpc.RpcError as e:
                failed += 1
                if failed < 3: print("failed:", e.details())
    secs = time.perf_counter() - t0
    restores = metric("mha_session_restores_total")
    rsum = metric("mha_session_restore_duration_seconds_sum")
    text = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics").read().decode()
    buckets = [(float(b), float(v)) for b, v in re.findall(
        r'mha_session_restore_duration_seconds_bucket\{le="([0-9.e+-]+)",model="[^"]*"\} (\S+)', text)]
    p50 = next((b for b, v in buckets if v >= restores / 2), None)
    # Session i at token p (1-based) holds ceil(p / 16) blocks when restored before step p + 1.
    blocks = sum(-(-p // 16) for p in range(1, 64)) * n
    print(f"spill: {n} sessions x 64 steps, {n * 64 - failed} ok, {failed} failed steps in {secs:.1f} s; "
          f"restores {restores:.0f}, restore p50 <= {p50} s (histogram bucket), mean per restore "
          f"{rsum / max(restores, 1) * 1e6:.0f} us, mean per block {rsum / blocks * 1e6:.1f} us "
          f"(~{blocks} blocks restored if every step restores); evictions "
          f"{metric('mha_session_evictions_total'):.0f}, spilled now {metric('mha_sessions_spilled'):.0f}")
