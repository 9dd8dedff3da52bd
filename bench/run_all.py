#!/usr/bin/python3
"""Every serving benchmark of bench/ in one command (docs/performance.md): starts its own servers
on loopback (the shipped defaults plus whatever follows `--`), runs each row asked for once and
prints one table with the same run's ceiling (one core's fp32 matmul rate, measured by
mha-client in that run) and the machine's load average before and after.

    bench/run_all.sh                       # the goal table: ~2 min on 2 cores
    bench/run_all.sh --quick               # shorter runs, 128-token sequences (a smoke run)
    bench/run_all.sh --device cuda --dtype float16   # both sides on the GPU (scripts/gpu-check.sh)
    bench/run_all.sh --rows c32,decode64   # some rows only
    bench/run_all.sh --rows mixed,deadline --deadline-range 1:80
    bench/run_all.sh --server OLD/mha-server --rows roofline   # another binary, for a before
    bench/run_all.sh -- --instances 2      # extra mha-server flags (every server)
Goal table rows (the default): echo, c32, c1, big, decode64, long, batching.
More rows (named, or --rows all): mixed (batching on/off, T 8..64, padding), deadline (computed
but undelivered), anchors (the echo floor beside bare gRPC servers), callgrind (instructions per
call), rest (REST vs gRPC), heads (selected weights), roofline (the Llama layer step), soak,
core (the core vs PyTorch in process). heads, roofline and core need Debian's python3-torch.
Speed is measured here, never asserted: the exit code is 0 when every run answered without
errors (and the soak held), whatever the table says.
"""
import argparse, json, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rows_goals, rows_more  # noqa: E402
from mha_bench import Server, loadavg, run_json  # noqa: E402

ROWS = {**rows_goals.ROWS, **rows_more.ROWS}
p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
p.add_argument("--build", default=os.environ.get("MHA_BUILD_DIR", "build"))
p.add_argument("--server", default=os.environ.get("MHA_SERVER"),
               help="the mha-server binary (default BUILD/server/mha-server; env MHA_SERVER)")
p.add_argument("--dur", type=float, default=5.0, help="seconds per timed bench run")
p.add_argument("--quick", action="store_true", help="--dur 1.5, 128-token sequences")
p.add_argument("--device", default=None)
p.add_argument("--dtype", default=None)
p.add_argument("--rows", default=",".join(rows_goals.ROWS), help="comma-separated, or all")
p.add_argument("--json", default=None, help="also write the results here")
p.add_argument("server_args", nargs="*")
rows_goals.add_options(p)
rows_more.add_options(p)


class Context:
    """What every row sees: the options, the binaries, the results, the table and the failures."""

    def __init__(self, a):
        self.a = a
        self.dur = f"{a.dur:g}"
        self.client = self.bin("client", "mha-client")
        self.server_bin = a.server or self.bin("server", "mha-server")
        self.placement = []
        for flag, value in (("--device", a.device), ("--dtype", a.dtype)):
            if value:
                self.placement += [flag, value]
        self.res = {"load_before": loadavg(), "device": a.device or "cpu",
                    "dtype": a.dtype or "float32", "server_args": a.server_args, "dur_s": a.dur}
        self.table, self.notes, self.failures = [], [], []
        self._shared = None

    def bin(self, *parts):
        return os.path.join(self.a.build, *parts)

    def server(self, *flags, **options):
        """An mha-server with the run's placement, `flags` and the flags after `--`."""
        return Server(self.server_bin, self.client, [*self.placement, *flags, *self.a.server_args],
                      **options)

    def shared(self):
        """The shipped-defaults server the goal rows share, started on first use."""
        if self._shared is None:
            self._shared = self.server()
        return self._shared

    def stop_shared(self):
        if self._shared is not None:
            self._shared.stop()
            self._shared = None

    def run_json(self, args, **options):
        return run_json(args, self.failures, **options)

    def add(self, figure, measured, goal="report", met="—"):
        self.table.append((figure, measured, goal, met))

    def note(self, text):
        self.notes.append(text)

    def g(self, key, fmt):
        return fmt.format(self.res[key]) if key in self.res else "—"

    def met(self, key, ok):
        return ("yes" if ok(self.res[key]) else "no") if key in self.res else "—"


def main():
    a, extra = p.parse_known_args()
    a.server_args += [x for x in extra if x != "--"]
    if a.quick:
        a.dur, a.long_tokens = min(a.dur, 1.5), min(a.long_tokens, 128)
    rows = list(ROWS) if a.rows == "all" else [r for r in a.rows.split(",") if r]
    for r in rows:
        if r not in ROWS:
            sys.exit(f"unknown row {r!r}; rows: {','.join(ROWS)}")
    ctx = Context(a)
    for r in rows:
        ROWS[r](ctx)
    ctx.stop_shared()
    res = ctx.res
    res["load_after"] = loadavg()
    print(f"# bench/run_all.py — {res['device']} {res['dtype']}, one run each, {a.dur:g} s per "
          f"bench run; load average {' '.join(res['load_before'])} before, "
          f"{' '.join(res['load_after'])} after")
    if "matmul_gflops" in res:
        print(f"# ceiling (same run): one core's fp32 matmul 512³ = {res['matmul_gflops']:.1f} "
              "GFLOP/s (mha-client, BLAS at one thread)")
    if "echo_p50_us" in res:
        print(f"# echo floor (same gRPC stack, 32 KiB each way, no compute): p50 "
              f"{res['echo_p50_us']:.0f} µs, server CPU {res['echo_cpu_us']:.0f} µs per request")
    if ctx.table:
        print("| figure | measured | goal | met |")
        print("|---|---|---|---|")
        for row in ctx.table:
            print("| " + " | ".join(row) + " |")
    rows_goals.print_stages(ctx)
    for n in ctx.notes:
        print("\n" + n)
    for f in ctx.failures:
        print(f"# error: {f}")
    if a.json:
        json.dump(res, open(a.json, "w"), indent=1)
    sys.exit(1 if ctx.failures else 0)


if __name__ == "__main__":
    main()
