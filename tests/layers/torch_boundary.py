#!/usr/bin/env python3
"""The tensor boundary (docs/architecture.md): LibTorch stays in the core. Four checks, each
failing with what broke it:

1. units: no translation unit of the server, the wire or the torch-free client libraries includes
   a LibTorch header, directly or through any header (says which unit, which LibTorch header and
   the project header that brought it in). Read from the build's recorded header dependencies
   (`ninja -t deps`) and the compile database.
2. folders: the core's two folders of public headers hold what they say: core/include/mha/ is
   torch-free (no LibTorch include, no include of a header of the torch folder), and every header
   of core/include_torch/mha/ needs LibTorch (includes it, or another header of that folder).
3. flags: no checked target compiles with the torch folder (core/include_torch) or a LibTorch
   include dir among its include flags: only mha::core_torch gives them (core/CMakeLists.txt).
4. probe: the compiler enforces it. With each checked target's own flags (one of its units'
   compile command, source swapped), `#include "mha/status.h"` compiles and `#include
   "mha/model.h"` does not (the header is not found), while the core's flags name its folder.

  torch_boundary.py --source SRC --build BUILD

Checked: units and targets under server/ and proto/, and the torch-free client and bench targets
(CHECKED_TARGETS). Allowed: the core (core/), serving's merge/split (server/serving/scheduling/
merge/, target mha_merge), and what runs the core in process: tests, benchmarks, the client's
tensor layer and command line.
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

TORCH_HEADER = re.compile(r"(^|/)(ATen|c10|caffe2)/|(^|/)include/torch/|/torch/csrc/")
ALLOWED_DIRS = ("server/serving/kinds/multihead/merge/",)
CHECKED_DIRS = ("server/", "proto/")
CHECKED_TARGETS = ("mha_client", "mha_client_bench", "mha_echo_floor")  # torch-free client side
TORCH_TARGETS = ("mha_merge",)  # the server's one target that links mha::core_torch
TORCH_FOLDER = "core/include_torch"
# Include dirs of LibTorch: Debian's, a wheel's or zip's, and their filtered views (MhaTorch.cmake).
TORCH_DIR = re.compile(r"/torch/csrc/api/include/?$|/torch/include(/|$)|/libtorch/include"
                       r"|/torch-include/")
INCLUDE_FLAGS = ("-I", "-isystem", "-iquote", "-idirafter")


UNITY_INCLUDE = re.compile(r'^#include "([^"]+)"$', re.M)


def unit_sources(file):
    """The sources a unit compiles: the file, or the files a unity unit (MhaUnity/unity_N.cc,
    cmake/MhaUnity.cmake) includes, by paths relative to it; checked as one, so a target whose
    files differ in what they may include (mha_merge) compiles file by file."""
    if "/MhaUnity/unity_" not in file:
        return [os.path.realpath(file)]
    here = os.path.dirname(file)
    return [os.path.realpath(os.path.join(here, f))
            for f in UNITY_INCLUDE.findall(open(file).read())]


def objects(build):
    """object path (relative to the build) -> (its sources (unit_sources), target, its
    precompiled header's object or None, (directory, compile arguments)): a unit compiled with
    `-include .../cmake_pch.hxx` sees what the PCH saw."""
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
        out[obj] = (unit_sources(e["file"]), m.group(1) if m else "", pch,
                    (e["directory"], args))
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


def checked(rel, target):
    if any(rel.startswith(d) for d in ALLOWED_DIRS):
        return False
    return any(rel.startswith(d) for d in CHECKED_DIRS) or target in CHECKED_TARGETS


def check_units(source, build, db):
    """Check 1: (problems, units checked)."""
    table = deps(build)
    units, bad = 0, []
    for obj, (files, target, pch, _) in sorted(db.items()):
        rels = [os.path.relpath(f, source) for f in files]
        if not any(checked(r, target) for r in rels):
            continue
        rel = " + ".join(rels)
        if obj not in table:
            return [f"{obj} has no recorded dependencies (build first)"], units
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
    if units == 0:
        bad.append("no unit checked: the check would prove nothing")
    return bad, units


INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)


def check_folders(source):
    """Check 2: the torch-free folder includes no LibTorch; the torch folder needs it."""
    free = os.path.join(source, "core/include/mha")
    torch = os.path.join(source, TORCH_FOLDER, "mha")
    torch_names = set(os.listdir(torch))
    bad = []
    for name in sorted(os.listdir(free)):
        for inc in INCLUDE.findall(open(os.path.join(free, name)).read()):
            if TORCH_HEADER.search(inc) or inc.startswith("torch/"):
                bad.append(f"core/include/mha/{name} includes <{inc}>: it belongs in {TORCH_FOLDER}")
            elif inc.startswith("mha/") and inc[4:] in torch_names:
                bad.append(f"core/include/mha/{name} includes {inc} of {TORCH_FOLDER}: it belongs "
                           f"there too")
    for name in sorted(torch_names):
        incs = INCLUDE.findall(open(os.path.join(torch, name)).read())
        if not any(TORCH_HEADER.search(i) or i.startswith("torch/") or
                   (i.startswith("mha/") and i[4:] in torch_names) for i in incs):
            bad.append(f"{TORCH_FOLDER}/mha/{name} needs no LibTorch: it belongs in core/include")
    return bad


def include_dirs(args):
    """The include dirs among a compile command's arguments."""
    out = []
    for i, a in enumerate(args):
        for flag in INCLUDE_FLAGS:
            if a == flag and i + 1 < len(args):
                out.append(args[i + 1])
            elif a.startswith(flag) and len(a) > len(flag) and a[len(flag)] in "/.":
                out.append(a[len(flag):])
    return out


def checked_targets(source, db):
    """target -> one of its compile entries (directory, args), for the targets checks 3, 4 check."""
    out = {}
    for obj, (files, target, _, entry) in sorted(db.items()):
        rels = [os.path.relpath(f, source) for f in files]
        in_dirs = any(r.startswith(d) for r in rels for d in CHECKED_DIRS)
        if target and target not in TORCH_TARGETS and (in_dirs or target in CHECKED_TARGETS):
            out.setdefault(target, entry)
    return out


def check_flags(source, targets):
    """Check 3: no checked target sees the torch folder or LibTorch's include dirs."""
    torch_folder = os.path.join(source, TORCH_FOLDER)
    bad = []
    for target, (_, args) in sorted(targets.items()):
        for d in include_dirs(args):
            if os.path.realpath(d).startswith(torch_folder) or TORCH_DIR.search(d):
                bad.append(f"{target} compiles with {d} among its include dirs")
    return bad


def probe_args(args, probe):
    """A unit's compile command turned into a syntax check of `probe`: its own flags, without its
    output, dependency file, precompiled header and source."""
    out, skip = [], 0
    for i, a in enumerate(args):
        if skip:
            skip -= 1
        elif a in ("-o", "-c", "-MT", "-MF", "-MQ", "-include"):
            skip = 1
        elif a in ("-MD", "-MMD", "-Winvalid-pch"):
            pass
        else:
            out.append(a)
    return out + ["-fsyntax-only", "-x", "c++", probe]


def compiles(directory, args, text, folder):
    probe = os.path.join(folder, "probe.cc")
    with open(probe, "w") as f:
        f.write(text + "\n")
    r = subprocess.run(probe_args(args, probe), cwd=directory, text=True, capture_output=True)
    return r.returncode == 0, r.stderr


def check_probe(source, targets, core_entry):
    """Check 4: the compiler refuses a torch header to every checked target, not to the core."""
    bad = []
    missing = re.compile(r"mha/model\.h.*(No such file|not found)")
    with tempfile.TemporaryDirectory() as folder:
        for target, (directory, args) in sorted(targets.items()):
            ok, err = compiles(directory, args, '#include "mha/status.h"', folder)
            # A target that sees no core header at all (mha_grpc_cq: gRPC only) cannot see the
            # torch folder either; the probe below must then fail the same way.
            if not ok and not re.search(r"mha/status\.h.*(No such file|not found)", err):
                bad.append(f"{target}: the control (mha/status.h) does not compile: {err[:300]}")
                continue
            ok, err = compiles(directory, args, '#include "mha/model.h"', folder)
            if ok or not missing.search(err):
                bad.append(f"{target} compiles mha/model.h (or fails otherwise): the torch folder "
                           f"is among its include dirs" + (f": {err[:300]}" if err else ""))
    # The controls of the other side: the probe names a header of the torch folder, and the core
    # (which links LibTorch) has that folder among its include dirs, as check 3 would see it.
    torch_folder = os.path.join(source, TORCH_FOLDER)
    if not os.path.isfile(os.path.join(torch_folder, "mha/model.h")):
        bad.append(f"{TORCH_FOLDER}/mha/model.h is gone: the probe would prove nothing")
    if core_entry is None:
        bad.append("no unit of mha_core in the compile database")
    elif not any(os.path.realpath(d) == torch_folder for d in include_dirs(core_entry[1])):
        bad.append(f"mha_core does not compile with {TORCH_FOLDER}: the flags check is blind")
    return bad


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--source", required=True)
    p.add_argument("--build", required=True)
    a = p.parse_args()
    source, build = os.path.realpath(a.source), os.path.realpath(a.build)
    db = objects(build)
    targets = checked_targets(source, db)
    core = next((e for (_, t, _, e) in db.values() if t == "mha_core"), None)
    bad, units = check_units(source, build, db)
    bad += check_folders(source)
    if not targets:
        bad.append("no target checked: the checks would prove nothing")
    bad += check_flags(source, targets)
    bad += check_probe(source, targets, core)
    for b in bad:
        print(b)
    if bad:
        print(f"torch-boundary: FAIL: {len(bad)} problem(s)", file=sys.stderr)
        return 1
    print(f"torch-boundary: {units} units of the server, the wire and the client libraries: no "
          f"LibTorch header; {len(targets)} targets ({', '.join(sorted(targets))}): no torch "
          f"include dir, and mha/model.h is not found with their flags")
    return 0


if __name__ == "__main__":
    sys.exit(main())
