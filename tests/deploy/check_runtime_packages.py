#!/usr/bin/python3
"""Checks deploy/runtime-packages.txt against the built binaries, without a Docker engine.

The Dockerfile's runtime stage installs exactly the packages listed in deploy/runtime-packages.txt
(apt-get install --no-install-recommends) and copies the binaries in. This check proves, on the
build machine, that such an image can load them:

  1. `ldd` resolves every shared library of every binary (none "not found").
  2. Every resolved library belongs to a Debian package (dpkg's file lists, as `dpkg -S`); a
     library from /usr/local, a virtual environment or a hand-copied file would be missing from
     the image.
  3. Every listed package exists in the apt lists (`apt-cache show`).
  4. An `apt-get --simulate install --no-install-recommends <list>` against an EMPTY dpkg status
     (a system with nothing installed) is computed; every library's package must be in that
     install set. This is apt's own resolver, alternatives and Provides included (e.g.
     "libblas3 | libblas.so.3" is satisfied by libopenblas0-pthread only because it is listed).
  5. Every listed package provides at least one of those libraries, or its line is marked
     "# tool:" (curl for the HEALTHCHECK): the list stays minimal.

Parts 3-4 need apt lists (/var/lib/apt/lists, filled by `apt-get update`). Without them the
script still runs parts 1, 2 and 5, then exits 77 (ctest: skipped) saying what it could not check.

  check_runtime_packages.py --packages deploy/runtime-packages.txt BINARY...
  check_runtime_packages.py --suggest BINARY...   # print the packages of the DT_NEEDED libraries

Dockerfile.cuda adds --exclude-prefix /opt/libtorch/ and /usr/local/cuda (libraries it copies in)
and --allow-missing libcuda.so.1 (the driver, mounted by the NVIDIA container runtime).
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

SKIP = 77


def run(cmd, check=False):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          check=check, env=dict(os.environ, LC_ALL="C"))


def read_package_list(path):
    """Returns {package: is_tool} from the list file."""
    packages = {}
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            body, _, comment = line.partition("#")
            body = body.strip()
            if not body:
                continue
            if not re.fullmatch(r"[a-z0-9][a-z0-9+.-]+", body):
                sys.exit(f"{path}:{lineno}: not a package name: {body!r}")
            if body in packages:
                sys.exit(f"{path}:{lineno}: {body} listed twice")
            packages[body] = comment.strip().startswith("tool:")
    if not packages:
        sys.exit(f"{path}: no packages")
    return packages


def ldd_libraries(binary, allow_missing=()):
    """Resolved paths of every shared library `ldd` reports; fails on 'not found'."""
    if not os.path.isfile(binary):
        sys.exit(f"FAIL: {binary} does not exist (build it first)")
    out = run(["ldd", binary])
    if out.returncode != 0:
        sys.exit(f"FAIL: ldd {binary}: {out.stderr.strip()}")
    libs, missing = {}, []
    for line in out.stdout.splitlines():
        line = line.strip()
        m = re.match(r"(\S+) => not found", line)
        if m:
            if m.group(1) not in allow_missing:
                missing.append(m.group(1))
            continue
        m = re.match(r"(\S+) => (/\S+) \(0x", line)
        if m:
            libs[m.group(2)] = m.group(1)
            continue
        m = re.match(r"(/\S+) \(0x", line)  # the dynamic loader itself
        if m:
            libs[m.group(1)] = os.path.basename(m.group(1))
    if missing:
        sys.exit(f"FAIL: {binary}: ldd cannot resolve {', '.join(missing)}")
    if not libs:
        sys.exit(f"FAIL: ldd found no shared library in {binary} (not a dynamic binary?)")
    return libs


def candidates(path):
    """Spellings under which dpkg may know a library (usrmerge, alternatives symlinks)."""
    out = []
    for p in (path, os.path.realpath(path)):
        out.append(p)
        if p.startswith("/usr/lib/"):
            out.append(p[len("/usr"):])
        elif p.startswith("/lib/") or p.startswith("/lib64/"):
            out.append("/usr" + p)
    return list(dict.fromkeys(out))


def dpkg_file_index():
    """{path: package} from dpkg's file lists (/var/lib/dpkg/info/<pkg>[:arch].list): one pass,
    much faster than one `dpkg-query -S` per library."""
    index = {}
    for lst in glob.glob("/var/lib/dpkg/info/*.list"):
        pkg = os.path.basename(lst)[:-len(".list")].split(":")[0]
        with open(lst, errors="replace") as f:
            for line in f:
                index.setdefault(line.rstrip("\n"), pkg)
    return index


def owning_packages(paths):
    """{path: package or None}."""
    index = dpkg_file_index()
    owner = {}
    for p in paths:
        owner[p] = next((index[c] for c in candidates(p) if c in index), None)
    # Cross-check with dpkg-query -S itself (also knows diversions) for what the index missed.
    for p in [p for p, pkg in owner.items() if pkg is None]:
        for c in candidates(p):
            out = run(["dpkg-query", "-S", c])
            line = next((l for l in out.stdout.splitlines()
                         if not l.startswith("diversion ") and l.endswith(": " + c)), None)
            if line:
                owner[p] = line.partition(": ")[0].split(",")[0].strip().split(":")[0]
                break
    return owner


def apt_lists_present():
    return bool(glob.glob("/var/lib/apt/lists/*_Packages*"))


def closure(packages):
    """Packages apt would install on an empty system for `install --no-install-recommends`."""
    with tempfile.TemporaryDirectory() as tmp:
        status = os.path.join(tmp, "status")
        open(status, "w").close()
        out = run(["apt-get", "--simulate", "--no-install-recommends",
                   "-o", f"Dir::State::status={status}",
                   "-o", f"Dir::State::extended_states={os.path.join(tmp, 'extended_states')}",
                   "-o", "Debug::NoLocking=1", "install", *packages])
    if out.returncode != 0:
        sys.exit("FAIL: apt-get --simulate install of the list failed:\n" + out.stdout[-3000:]
                 + out.stderr[-3000:])
    installed = {m.group(1).split(":")[0]
                 for m in re.finditer(r"^Inst (\S+)", out.stdout, re.MULTILINE)}
    if not installed:
        sys.exit("FAIL: apt-get --simulate printed no 'Inst' line:\n" + out.stdout[-2000:])
    return installed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--packages", help="deploy/runtime-packages.txt")
    ap.add_argument("--suggest", action="store_true",
                    help="print the packages that provide the binaries' DT_NEEDED libraries")
    ap.add_argument("--exclude-prefix", action="append", default=[],
                    help="libraries under this path are shipped by the image itself (COPY)")
    ap.add_argument("--allow-missing", action="append", default=[],
                    help="soname that may be 'not found' here (provided at run time)")
    ap.add_argument("binaries", nargs="+")
    args = ap.parse_args()

    needed_by = {}  # resolved path -> first binary that needs it
    soname_path = {}
    for binary in args.binaries:
        for path, soname in ldd_libraries(binary, args.allow_missing).items():
            if any(os.path.realpath(path).startswith(p) or path.startswith(p)
                   for p in args.exclude_prefix):
                continue
            soname_path[soname] = path
            needed_by.setdefault(path, binary)
    lib_owner = owning_packages(needed_by)  # resolved path -> package
    unowned = [f"{p} (needed by {b})" for p, b in needed_by.items() if lib_owner[p] is None]
    print(f"{len(lib_owner)} shared libraries from {len(set(lib_owner.values()) - {None})} "
          f"packages for {len(args.binaries)} binaries")
    if unowned:
        print("FAIL: libraries that no Debian package provides (an image could not have them):")
        for u in unowned:
            print("  " + u)
        return 1

    if args.suggest:
        needed = set()
        for binary in args.binaries:
            out = run(["readelf", "-d", binary], check=True).stdout
            for so in re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out):
                if so in soname_path:  # not excluded, not allowed-missing
                    needed.add(lib_owner[soname_path[so]])
        print("\n".join(sorted(needed)))
        return 0

    if not args.packages:
        ap.error("--packages is required (or --suggest)")
    listed = read_package_list(args.packages)
    failures = []

    # 5. Minimal: each package provides a library, unless marked as a tool.
    lib_packages = set(lib_owner.values())
    for pkg, is_tool in listed.items():
        if not is_tool and pkg not in lib_packages:
            failures.append(f"{pkg} is listed but provides none of the binaries' libraries "
                            "(remove it, or mark its line '# tool: why')")

    if not apt_lists_present():
        for f in failures:
            print("FAIL: " + f)
        if failures:
            return 1
        print("SKIP: no apt lists in /var/lib/apt/lists (run apt-get update): cannot check that "
              "the listed packages exist nor that their dependency closure provides every library. "
              "Checked only: ldd resolves everything, every library is from a Debian package, "
              "every listed package provides one of them.")
        return SKIP

    # 3. Every listed package exists (one apt-cache call: each one rebuilds apt's cache, ~1 s).
    out = run(["apt-cache", "show", "--no-all-versions", *listed])
    known = set(re.findall(r"^Package: (\S+)", out.stdout, re.MULTILINE))
    unknown = [pkg for pkg in listed if pkg not in known]
    for pkg in unknown:
        failures.append(f"{pkg}: not known to apt (apt-cache show)")
    if unknown:  # apt-get --simulate would only fail on them
        for f in failures:
            print("FAIL: " + f)
        return 1

    # 4. The install set from an empty system covers every library.
    install_set = closure(sorted(listed))
    print(f"apt would install {len(install_set)} packages for the {len(listed)} listed")
    by_package = {}
    for path, pkg in lib_owner.items():
        if pkg not in install_set:
            by_package.setdefault(pkg, []).append(path)
    for pkg, paths in sorted(by_package.items()):
        failures.append(f"{pkg} (provides {', '.join(sorted(paths))}) is neither listed nor "
                        "pulled in by the listed packages' dependencies")
    for f in failures:
        print("FAIL: " + f)
    if failures:
        print(f"(direct packages of the binaries: {sys.argv[0]} --suggest BINARY...)")
        return 1
    print(f"OK: every library of {', '.join(args.binaries)} comes with {args.packages}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
