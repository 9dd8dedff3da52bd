#!/usr/bin/env python3
"""What a failed build needs someone to read, from a Ninja log (scripts/gpu-check.sh: errors.txt).

  scripts/build_errors.py BUILD_LOG [--first N]

Prints, in this order:
  1. the failed edges (Ninja's FAILED: lines), counted;
  2. the first N failed compile or link edges in full (Ninja's command and the compiler's output,
     each cut at 250 lines);
  3. every undefined symbol, demangled and deduplicated, with how many references it had and the
     first objects that referenced it; then the linker's other complaints ("DSO missing",
     "multiple definition", hidden symbols), deduplicated;
  4. every distinct compiler error line (file:line: error: ...), counted.
Lines are never cut in the middle: the symbol names are what a reader needs.
"""
import argparse
import collections
import re
import shutil
import subprocess
import sys

UNDEF = re.compile(r"undefined reference to [`'‘](.+?)['’]\s*$")
IN_OBJ = re.compile(r"^(?:/\S*ld(?:\.\w+)?: )?(\S+\.o(?:bj)?)(?:\)|:)")
LINKER_OTHER = re.compile(r"(DSO missing from command line|multiple definition of|hidden symbol|"
                          r"relocation .* against|cannot find -l\S+|undefined symbol)")
COMPILE_ERR = re.compile(r"^(\S+?:\d+:\d+: (?:fatal )?error: .*)$")


def demangle(names):
    """c++filt over a list of names (unchanged where it is absent or a name is not mangled)."""
    if not names or not shutil.which("c++filt"):
        return list(names)
    out = subprocess.run(["c++filt"], input="\n".join(names) + "\n", text=True,
                         capture_output=True, check=False).stdout.splitlines()
    return out if len(out) == len(names) else list(names)


def failed_blocks(lines):
    """(edge, block lines) for every FAILED: edge: its lines up to the next Ninja status line."""
    blocks, cur = [], None
    for line in lines:
        if line.startswith("FAILED: "):
            cur = (line[len("FAILED: "):].strip(), [line])
            blocks.append(cur)
        elif cur is not None and re.match(r"^\[\d+/\d+\] |^ninja: ", line):
            cur = None
        elif cur is not None:
            cur[1].append(line)
    return blocks


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("log")
    p.add_argument("--first", type=int, default=3)
    a = p.parse_args()
    lines = open(a.log, errors="replace").read().splitlines()
    blocks = failed_blocks(lines)
    out = sys.stdout
    print(f"# {a.log}: {len(blocks)} failed edges", file=out)
    if not blocks:
        print("# no FAILED: edge in the log (the build passed, or never started)", file=out)
    for edge, _ in blocks:
        print(f"FAILED {edge}", file=out)

    print(f"\n# the first {min(a.first, len(blocks))} failed edges in full", file=out)
    for edge, block in blocks[:a.first]:
        print(f"\n## {edge}", file=out)
        for line in block[:250]:
            print(line, file=out)
        if len(block) > 250:
            print(f"... ({len(block) - 250} more lines)", file=out)

    refs, objs, other = collections.Counter(), collections.defaultdict(list), collections.Counter()
    last_obj = None
    for line in lines:
        m = IN_OBJ.match(line)
        if m:
            last_obj = m.group(1)
        m = UNDEF.search(line)
        if m:
            sym = m.group(1)
            refs[sym] += 1
            if last_obj and last_obj not in objs[sym] and len(objs[sym]) < 5:
                objs[sym].append(last_obj)
        elif LINKER_OTHER.search(line):
            other[re.sub(r"\(\.text[^)]*\)", "(.text…)", line.strip())] += 1
    names = list(refs)
    print(f"\n# {len(names)} undefined symbols (demangled, deduplicated; references, "
          f"first referencing objects)", file=out)
    for sym, nice in sorted(zip(names, demangle(names)), key=lambda x: -refs[x[0]]):
        print(f"{refs[sym]:6d}  {nice}", file=out)
        if nice != sym:
            print(f"        mangled: {sym}", file=out)
        if objs[sym]:
            print(f"        from: {', '.join(objs[sym])}", file=out)
    print(f"\n# {len(other)} other linker complaints (deduplicated)", file=out)
    for text, n in other.most_common():
        print(f"{n:6d}  {text}", file=out)

    errs = collections.Counter(m.group(1) for m in map(COMPILE_ERR.match, lines) if m)
    print(f"\n# {len(errs)} distinct compiler errors (counted)", file=out)
    for text, n in errs.most_common():
        print(f"{n:6d}  {text}", file=out)


if __name__ == "__main__":
    main()
