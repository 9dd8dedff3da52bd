#!/usr/bin/env python3
"""The tensor boundary (docs/architecture.md): LibTorch stays in the core. Fails when a
translation unit of the server, the wire or the torch-free client library includes a LibTorch
header, directly or through any header, and says which unit, which LibTorch header and the
project header that brought it in.

Reads what the build already knows: every object's header dependencies as the compiler reported
them (`ninja -t deps`, recorded by the build) and the compile database (which object is which
unit). No compilation.

  torch_boundary.py --source SRC --build BUILD

Checked: units under server/ and proto/, and the client library's (target mha_client).
Allowed: the core (core/), serving's merge/split (server/serving/scheduling/merge/), and what
runs the core in process: tests, benchmarks, the client's tensor layer and command line.
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys

TORCH_HEADER = re.compile(r"(^|/)(ATen|c10|caffe2)/|(^|/)include/torch/|/torch/csrc/")
ALLOWED_DIRS = ("server/serving/scheduling/merge/",)
CHECKED_DIRS = ("server/", "proto/")
CHECKED_TARGETS = ("mha_client",)  # client/'s torch-free library


def objects(build):
    """object path (relative to the build) -> (source file, target, its precompiled header's
    object or None): a unit compiled with `-include .../cmake_pch.hxx` sees what the PCH saw."""
    out = {}
    for e in json.load(open(os.path.join(build, "compile_commands.json"))):
        args = shlex.split(e["command"])
        if "-o" not in args:
            continue
        obj = args[args.index("-o") + 1]
        m = re.search(r"CMakeFiles/([^/]+)\.dir/", obj)
        pch = None
        for i, x in enumerate(args[:-1]):
            if x == "-include" and args[i + 1].endswith("cmake_pch.hxx"):
                pch = os.path.relpath(args[i + 1] + ".gch", build)
        out[obj] = (e["file"], m.group(1) if m else "", pch)
    return out


def deps(build):
    """object -> its header dependencies, in the compiler's order."""
    text = subprocess.run(["ninja", "-C", build, "-t", "deps"], check=True, text=True,
                          capture_output=True).stdout
    table, current = {}, None
    for line in text.splitlines():
        if line and not line.startswith(" "):
            current = line.split(":")[0]
            table[current] = []
        elif current is not None and line.strip():
            table[current].append(line.strip())
    return table


def checked(source, rel, target):
    if any(rel.startswith(d) for d in ALLOWED_DIRS):
        return False
    return any(rel.startswith(d) for d in CHECKED_DIRS) or target in CHECKED_TARGETS


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--source", required=True)
    p.add_argument("--build", required=True)
    a = p.parse_args()
    source, build = os.path.realpath(a.source), os.path.realpath(a.build)
    table = deps(build)
    units, bad = 0, []
    for obj, (file, target, pch) in sorted(objects(build).items()):
        rel = os.path.relpath(os.path.realpath(file), source)
        if not checked(source, rel, target):
            continue
        if obj not in table:
            print(f"torch-boundary: FAIL: {obj} has no recorded dependencies (build first)",
                  file=sys.stderr)
            return 1
        units += 1
        via = None
        seen = table[obj][1:] + (table.get(pch, []) if pch else [])
        for dep in seen:
            if TORCH_HEADER.search(dep):
                bad.append(f"{rel} ({target}) includes {dep}" + (f", via {via}" if via else ""))
                break
            real = os.path.realpath(dep)
            if real.startswith(source + os.sep):
                via = os.path.relpath(real, source)
            elif dep.endswith("cmake_pch.hxx"):
                via = "its precompiled header (mha_pch)"
    for b in bad:
        print(b)
    if bad:
        print(f"torch-boundary: FAIL: {len(bad)} of {units} units outside the core include "
              f"LibTorch", file=sys.stderr)
        return 1
    if units == 0:
        print("torch-boundary: FAIL: no unit checked: the check would prove nothing",
              file=sys.stderr)
        return 1
    print(f"torch-boundary: {units} units of the server, the wire and the client library: "
          f"no LibTorch header")
    return 0


if __name__ == "__main__":
    sys.exit(main())
