#!/usr/bin/env python3
"""compile_db.py BUILD_DIR OUT_DIR [FILE...]: BUILD_DIR/compile_commands.json with every unity
unit (cmake/MhaUnity.cmake: <target>.dir/MhaUnity/unity_N.cc, lines `#include "<relative path>"`)
replaced by one entry per file it includes, each with the unit's command, written to
OUT_DIR/compile_commands.json. clang-tidy (scripts/lint.sh tidy) then checks a file of a unity
target with exactly its target's flags, as it would in a build that compiles file by file.
Exits 1 when a FILE (relative to the working directory) has no entry: clang-tidy would guess its
flags from a neighbour instead of failing.
"""
import json
import os
import re
import sys

INCLUDE = re.compile(r'^#include "([^"]+)"$')


def members(unit):
    """The files a unit includes, absolute; None when it is not a unit of ours."""
    if os.path.basename(os.path.dirname(unit)) != "MhaUnity":
        return None
    out = []
    with open(unit) as f:
        for line in f:
            m = INCLUDE.match(line.strip())
            if not m:
                return None
            out.append(os.path.normpath(os.path.join(os.path.dirname(unit), m.group(1))))
    return out


def expand(entries):
    out = []
    for e in entries:
        unit = os.path.normpath(os.path.join(e["directory"], e["file"]))
        files = members(unit) if os.path.exists(unit) else None
        if not files:
            out.append(e)
            continue
        for f in files:
            one = dict(e, file=f)
            if "command" in one:
                one["command"] = one["command"].replace(e["file"], f)
            if "arguments" in one:
                one["arguments"] = [f if a == e["file"] else a for a in one["arguments"]]
            out.append(one)
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    build, dest, wanted = sys.argv[1], sys.argv[2], sys.argv[3:]
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = expand(json.load(f))
    os.makedirs(dest, exist_ok=True)
    with open(os.path.join(dest, "compile_commands.json"), "w") as f:
        json.dump(entries, f, indent=1)
    have = {os.path.normpath(os.path.join(e["directory"], e["file"])) for e in entries}
    missing = [w for w in wanted if os.path.abspath(w) not in have]
    if missing:
        sys.exit(f"compile_db: no compile command for {' '.join(missing)} in {build} "
                 "(not built by any target?)")


if __name__ == "__main__":
    main()
