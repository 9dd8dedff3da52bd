#!/usr/bin/env python3
# summary.json of scripts/gpu-check.sh (its step 50-summary.sh): the steps' results, the risks, the
# ctest totals, the benchmarks' medians and their ratios to PyTorch's; and rows.md, the open
# issues' GPU rows (steps coldstart, goals, longseq, llamastep: 25-rows.sh) as one table with the
# steps' results. summary.json and rows.md are small text (well under 1 MiB together) meant to be
# committed as they come back, with errors.txt, under bench/results/gpu/<date>-<card>/
# (50-summary.sh says how).
# Usage: summary.py RESULTS_TSV BENCH_DIR OUT CUDA_ON COMMIT
import glob, json, os, re, sys, datetime
results, bdir, out, cuda_on, commit = sys.argv[1:6]


def text(path):
    """A log's text, or "" when its steps did not run."""
    try:
        return open(path, errors="replace").read()
    except OSError:
        return ""


s = {"date": datetime.datetime.utcnow().isoformat() + "Z", "commit": commit,
     "cuda_support": cuda_on == "true", "steps": {}}
for line in open(results):
    name, rc, secs = line.rstrip("\n").split("\t")
    s["steps"][name] = {"rc": rc, "seconds": int(secs)}
risks = text(os.path.join(out, "risks.log"))
for key, pat in {"glibc": r"ldd \(.*?\) ([0-9.]+)", "torch": r"^torch (\S+)",
                 "cxx11_abi": r"CXX11 ABI (\w+)", "device": r"^device (.+)$"}.items():
    m = re.search(pat, risks, re.M)
    s[key] = m.group(1) if m else None
s["libtorch_protobuf_exports"] = re.findall(r"^(\S+): (\d+) exported google::protobuf", risks, re.M)
ctest = text(os.path.join(out, "ctest.log"))
# "98% tests passed, 3 tests failed out of 135", or "100% tests passed out of 135" when none failed.
m = re.search(r"(\d+)% tests passed(?:, (\d+) tests failed)? out of (\d+)", ctest)
s["ctest"] = {"passed_pct": int(m.group(1)), "failed": int(m.group(2) or 0), "total": int(m.group(3))} if m else None
s["ctest_failed"] = re.findall(r"^\s*\d+ - (\S+) \(", ctest, re.M)[:40]
core = {}
for f in sorted(glob.glob(os.path.join(bdir, "core_*.json"))):
    key = os.path.basename(f)[5:-5]
    try:
        for b in json.load(open(f))["benchmarks"]:
            if b.get("aggregate_name") == "median":
                core[f"{key}/{b['run_name']}"] = {k: b[k] for k in ("real_time", "time_unit", "passes/s", "GFLOP/s") if k in b}
    except Exception as e:
        core[key] = {"error": str(e)}
s["core_bench"] = core
stream = {}
for f in sorted(glob.glob(os.path.join(bdir, "stream_*.json"))):
    key = os.path.basename(f)[7:-5]
    try:
        for b in json.load(open(f))["benchmarks"]:
            if b.get("aggregate_name") == "median" and "passes/s" in b:
                stream[f"{key}/{b['run_name']}"] = b["passes/s"]
    except Exception as e:
        stream[key] = str(e)
s["stream_bench_passes_per_s"] = stream
s["stream_overlap"] = {k.replace("/threads:2", ""): v / stream[k.replace("threads:2", "threads:1")]
                       for k, v in stream.items() if k.endswith("/threads:2")
                       and isinstance(v, float) and stream.get(k.replace("threads:2", "threads:1"))}
# servebench's lines, as printed (bench.log has the rest).
bench_log = text(os.path.join(out, "bench.log"))
serve = bench_log.split("[servebench]", 1)[1] if "[servebench]" in bench_log else ""
s["serve_bench"] = [l for l in serve.splitlines()
                    if re.match(r"(###|median:|throughput:|step latency|\| batching|# error)", l)]
goals = bench_log.split("[goals]", 1)[1] if "[goals]" in bench_log else ""
s["goal_table"] = [l for l in goals.splitlines() if l.startswith(("|", "# "))]
st = os.path.join(bdir, "streamtest.txt")
s["streamtest_tail"] = open(st, errors="replace").read().splitlines()[-6:] if os.path.exists(st) else None
try:
    ref = json.load(open(os.path.join(out, "torch_ref.json")))
    s["torch_ref"] = ref
    ratios = {}
    for c in ref["cases"]:
        if "op" in c or "ms" not in c:
            continue
        key = f"{c['B']}_{c['T']}_{c['E']}_{c['H']}_{c['dtype']}"
        # Like for like: PyTorch back to back ("ms") against BM_ForwardQueued (a device caller's
        # passes queued back to back), and synchronized per pass ("ms_synced") against BM_Forward
        # (each pass synchronized): ".../synced". BM_Forward stands in where Queued did not run.
        for suffix, ms, bench in (("", c["ms"], "BM_ForwardQueued"), ("/synced", c.get("ms_synced"), "BM_Forward")):
            if not ms:
                continue
            for graphs in (0, 1):
                if graphs and c["need_weights"]:
                    continue
                args = f"need_weights:{int(c['need_weights'])}/graphs:{graphs}/real_time"
                b = core.get(f"{key}/{bench}/{args}") or core.get(f"{key}/BM_Forward/{args}")
                if b and "passes/s" in b:
                    name = f"{key}/need_weights:{int(c['need_weights'])}{'/graphs' if graphs else ''}{suffix}"
                    ratios[name] = b["passes/s"] * ms / 1e3
    s["core_over_torch_speed"] = ratios
    for bench, name in (("BM_ForwardQueued", "big_bf16_no_weights_over_matmul"),
                        ("BM_Forward", "big_bf16_no_weights_over_matmul_synced")):
        big = core.get(f"4_4096_2048_16_bfloat16/{bench}/need_weights:0/graphs:0/real_time")
        if big and "GFLOP/s" in big:
            s[name] = big["GFLOP/s"] / 1e3 / ref["matmul_8192_bf16_tflops"]
except Exception as e:
    s["torch_ref_error"] = str(e)
try:
    paired = json.load(open(os.path.join(bdir, "paired.json")))
    s["paired"] = {f"{c['B']}_{c['T']}_{c['E']}_{c['H']}_{c['dtype']}": {
        "ratio": c["ratio"], "core_over_matmul": c["core_over_matmul"],
        "clocks": [r[side]["clocks"] for r in c["rounds"] for side in r["order"]]} for c in paired["cases"]}
except Exception as e:
    s["paired_error"] = str(e)
# ---- the open issues' GPU rows (25-rows.sh): rows.md, and the same rows in summary.json --------
rows, details = [], {}
for f in sorted(glob.glob(os.path.join(bdir, "rows_*.json"))):
    try:
        r = json.load(open(f))
    except Exception as e:
        rows.append({"issue": "?", "figure": os.path.basename(f), "measured": f"unreadable: {e}",
                     "goal": "", "step": "?"})
        continue
    rows += [dict(x, step=r["row"]) for x in r.get("rows", [])]
    if not r.get("rows"):  # cut by its cap, or failed before it measured
        rows.append({"issue": "", "figure": f"{r['row']}: no row", "goal": "", "step": r["row"],
                     "measured": "; ".join(map(str, r.get("errors", [])))[-400:] or "—"})
    details[r["row"]] = {k: v for k, v in r.items() if k != "rows"}
for name, step, how in (("goals.json", "goals", ""),
                        ("goals_block.json", "goalsblock", ", --device-wait block")):
    try:
        g = json.load(open(os.path.join(bdir, name)))
        details[step] = g
        dt = g.get("dtype")
        where = "GPU" if g.get("device", "cpu") != "cpu" else "CPU (a dry run)"
        if "batch_on_rps" in g:
            rows.append({"issue": "46", "step": step, "goal": "≥ 40k on an H100 (19.5k)",
                         "figure": f"{where}: 64 clients of B=1,T=16 {dt}, warm: req/s{how}",
                         "measured": f"{g['batch_on_rps']:.0f} req/s (batching off "
                                     f"{g['batch_off_rps']:.0f}; server CPU "
                                     f"{g['batch_on_cpu_us']:.0f} µs a request; {g['dur_s']:g} s "
                                     f"after the same load untimed)"})
        if "decode64_cpu_us" in g:
            rows.append({"issue": "46", "step": step, "goal": "≤ 100 µs (369)",
                         "figure": f"{where}: decode 64 sessions, server CPU per step ({dt}{how})",
                         "measured": f"{g['decode64_cpu_us']:.0f} µs "
                                     f"({g['decode64_steps_per_s']:.0f} steps/s)"})
    except FileNotFoundError:
        pass
    except Exception as e:
        rows.append({"issue": "46", "step": step, "figure": name, "goal": "",
                     "measured": f"unreadable: {e}"})
rows.sort(key=lambda x: (x["issue"], x["step"]))
s["gpu_rows"], s["gpu_rows_details"] = rows, details
with open(os.path.join(out, "rows.md"), "w") as f:
    f.write(f"# GPU rows: {s.get('device') or 'no GPU seen'}, {s['date'][:16]}Z, commit "
            f"{commit[:12]}, torch {s.get('torch')}\n\n"
            "scripts/gpu-check.sh, one call; each row from one run of its step "
            "(scripts/gpu-check/25-rows.sh). The raw figures: summary.json, gpu_rows_details.\n\n"
            "| issue | figure | measured | goal | step |\n|---|---|---|---|---|\n")
    for x in rows:
        f.write(f"| {x['issue']} | {x['figure']} | {x['measured']} | {x['goal']} | {x['step']} |\n")
    f.write("\n| step | rc | seconds |\n|---|---|---|\n")
    for name, st in s["steps"].items():
        f.write(f"| {name} | {st['rc']} | {st['seconds']} |\n")
    if s["goal_table"]:
        f.write("\n" + "\n".join(s["goal_table"]) + "\n")
json.dump(s, open(os.path.join(out, "summary.json"), "w"), indent=1)
print(json.dumps({k: s[k] for k in ("cuda_support", "steps", "ctest")}, indent=1))
