#!/usr/bin/python3
"""The kernels of an `ncu --csv --page raw` log (scripts/gpu-profile.sh): one line a kernel with
each metric asked for, then each metric's sum over the kernels; --label names the side.

    ncu --csv --page raw --metrics gpu__time_duration.sum,sm__cycles_elapsed.max ... > log
    bench/ncu_kernels.py log --label mha_core
Cycles (sm__cycles_elapsed.max) do not depend on the clock the card ran at: equal cycles for the
same kernels on two sides mean equal work, whatever their durations.
"""
import argparse, csv


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("log")
    p.add_argument("--label", default="")
    a = p.parse_args()
    text = open(a.log, errors="replace").read()
    rows = list(csv.reader(l for l in text.splitlines() if l.startswith('"')))
    if len(rows) < 3:
        print(f"{a.label}: no kernels in the ncu log; its tail:\n{text[-2000:]}")
        return
    head, units = rows[0], rows[1]
    name = head.index("Kernel Name")
    metrics = [i for i, h in enumerate(head) if "__" in h]
    sums = {i: 0.0 for i in metrics}
    print(f"### {a.label}: " + "  ".join(f"{head[i]} ({units[i]})" for i in metrics))
    for r in rows[2:]:
        values = []
        for i in metrics:
            v = float(r[i].replace(",", "") or 0)
            sums[i] += v
            values.append(f"{v:>14.1f}")
        print(" ".join(values) + "  " + r[name][:100])
    print(f"{a.label} sum over {len(rows) - 2} kernels: " +
          "  ".join(f"{head[i]} {sums[i]:.1f} {units[i]}" for i in metrics))


if __name__ == "__main__":
    main()
