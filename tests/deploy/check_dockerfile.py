#!/usr/bin/python3
"""Static checks of Dockerfile, Dockerfile.cuda and .dockerignore (no Docker engine needed).

Dockerfile (CPU):
  - the build stage is debian:12 and installs/builds ONLY through the README's scripts:
    `scripts/install-deps.sh build`, then `MHA_TARGETS="mha-server mha-client" scripts/build.sh`
    (no apt-get install of its own), and runs check_runtime_packages.py on the binaries;
  - the final image (its FROM chain) is debian:12-slim (or debian:12), never the build stage; it
    takes from the build stage only build/server/mha-server and build/client/mha-client; installs
    packages only from deploy/runtime-packages.txt; runs as USER 10001; has a HEALTHCHECK on
    /readyz of MHA_METRICS_ADDRESS's port (no fixed 8502), EXPOSE 8500 and 8502, ENV
    MHA_GRPC_ADDRESS / MHA_METRICS_ADDRESS, MHA_GRACE_PERIOD_S below Docker's 10 s stop timeout,
    STOPSIGNAL SIGTERM and an ENTRYPOINT that is mha-server;
  - no `# syntax=` directive (BuildKit would fetch that frontend from Docker Hub);
  - the smoke stage starts mha-server on port 0 with port files (no fixed ports at build time);
  - every file it COPYs from the context exists and is not excluded by .dockerignore.
Dockerfile.cuda: the same scripts (build.sh with -DCMAKE_PREFIX_PATH=/opt/libtorch), the LibTorch
ARG, user, HEALTHCHECK, ports, ENV, grace period, STOPSIGNAL, no syntax directive, a Debian 12
runtime base.
.dockerignore: excludes .git and build trees, keeps what the build needs.
"""
import argparse
import fnmatch
import os
import re
import shlex
import sys


def parse(path):
    """[(instruction, args, lineno)] with continuations joined and comment lines dropped."""
    out, buf, start = [], "", None
    with open(path) as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if line.lstrip().startswith("#"):
                continue  # comments and parser directives, also inside a continued instruction
            if not buf and not line.strip():
                continue
            if start is None:
                start = lineno
            if line.endswith("\\"):
                buf += line[:-1] + " "
                continue
            buf += line
            if buf.strip():
                word, _, rest = buf.strip().partition(" ")
                out.append((word.upper(), rest.strip(), start))
            buf, start = "", None
    return out


class Stage:
    def __init__(self, index, base, name, lineno):
        self.index, self.base, self.name, self.lineno = index, base, name, lineno
        self.instructions = []


def stages_of(instructions):
    global_args, stages = {}, []
    for word, rest, lineno in instructions:
        if word == "ARG" and not stages:
            k, _, v = rest.partition("=")
            global_args[k.strip()] = v.strip().strip('"')
        elif word == "FROM":
            toks = [t for t in rest.split() if not t.startswith("--")]
            base = re.sub(r"\$\{?(\w+)\}?", lambda m: global_args.get(m.group(1), m.group(0)),
                          toks[0])
            name = toks[2] if len(toks) >= 3 and toks[1].upper() == "AS" else None
            stages.append(Stage(len(stages), base, name, lineno))
        elif stages:
            stages[-1].instructions.append((word, rest, lineno))
    return stages


def chain(stages, stage):
    """The stage and the stages it is built FROM, the stage itself first."""
    by_name = {s.name: s for s in stages if s.name}
    out = [stage]
    while stage.base in by_name and by_name[stage.base].index < stage.index:
        stage = by_name[stage.base]
        out.append(stage)
    return out


def all_instr(ch, word):
    """Instructions of a chain, oldest stage first."""
    return [(r, l) for s in reversed(ch) for w, r, l in s.instructions if w == word]


def copy_parts(rest):
    toks = shlex.split(rest)
    opts = {t.split("=", 1)[0]: t.split("=", 1)[1] if "=" in t else "" for t in toks
            if t.startswith("--")}
    paths = [t for t in toks if not t.startswith("--")]
    return opts, paths[:-1], paths[-1] if paths else None


def dockerignore_patterns(repo):
    path = os.path.join(repo, ".dockerignore")
    if not os.path.exists(path):
        return []
    pats = []
    for line in open(path):
        line = line.strip()
        if line and not line.startswith("#"):
            pats.append(line)
    return pats


def ignored(rel, patterns):
    """Simplified .dockerignore semantics: a pattern matches the path or one of its parents."""
    parts = rel.split("/")
    result = False
    for pat in patterns:
        neg = pat.startswith("!")
        p = pat[1:] if neg else pat
        p = p.strip("/")
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            if fnmatch.fnmatch(prefix, p) or (p.startswith("**/") and
                                               fnmatch.fnmatch(parts[i - 1], p[3:])):
                result = not neg
                break
    return result


def check_common(fail, stages, final_chain, label, slim_ok):
    root = final_chain[-1]
    fail(re.fullmatch(r"debian:12(-slim)?", root.base) if slim_ok else True,
         f"{label}: the final image must be based on debian:12-slim / debian:12, is {root.base}")
    users = all_instr(final_chain, "USER")
    fail(users, f"{label}: no USER in the final image")
    if users:
        user = users[-1][0].split(":")[0]
        fail(user == "10001", f"{label}: final USER must be 10001 (non-root), is {users[-1][0]}")
    hcs = all_instr(final_chain, "HEALTHCHECK")
    fail(hcs and "NONE" not in hcs[-1][0].upper().split()[:1],
         f"{label}: no HEALTHCHECK in the final image")
    if hcs:
        hc = hcs[-1][0]
        # The port comes from MHA_METRICS_ADDRESS (a `docker run -e` that moves it is followed).
        fail(" CMD " in f" {hc} " and "/readyz" in hc and "MHA_METRICS_ADDRESS" in hc
             and not re.search(r":8502\b", hc),
             f"{label}: HEALTHCHECK must probe /readyz on MHA_METRICS_ADDRESS's port: {hc}")
    # Grace period below `docker stop`'s default timeout (10 s), SIGTERM as the stop signal.
    env_all = " ".join(r for r, _ in all_instr(final_chain, "ENV"))
    m = re.search(r"MHA_GRACE_PERIOD_S=([0-9.]+)", env_all)
    fail(m and float(m.group(1)) < 10,
         f"{label}: ENV MHA_GRACE_PERIOD_S below Docker's 10 s stop timeout")
    sigs = all_instr(final_chain, "STOPSIGNAL")
    fail(sigs and sigs[-1][0].strip() == "SIGTERM", f"{label}: STOPSIGNAL SIGTERM")
    exposed = set()
    for rest, _ in all_instr(final_chain, "EXPOSE"):
        exposed |= {p.split("/")[0] for p in rest.split()}
    fail({"8500", "8502"} <= exposed, f"{label}: EXPOSE 8500 and 8502 (has {sorted(exposed)})")
    env_text = " ".join(r for r, _ in all_instr(final_chain, "ENV"))
    fail("MHA_GRPC_ADDRESS=0.0.0.0:8500" in env_text, f"{label}: ENV MHA_GRPC_ADDRESS=0.0.0.0:8500")
    fail("MHA_METRICS_ADDRESS=0.0.0.0:8502" in env_text,
         f"{label}: ENV MHA_METRICS_ADDRESS=0.0.0.0:8502")
    eps = all_instr(final_chain, "ENTRYPOINT")
    fail(eps and "mha-server" in eps[-1][0], f"{label}: ENTRYPOINT must run mha-server")
    build = [s for s in stages if any(w == "RUN" and "scripts/install-deps.sh" in r
                                      for w, r, _ in s.instructions)]
    fail(len(build) == 1, f"{label}: exactly one stage must run scripts/install-deps.sh")
    if not build:
        return None
    build = build[0]
    fail(build not in final_chain, f"{label}: the final image must not be the build stage")
    runs = [(r, l) for w, r, l in build.instructions if w == "RUN"]
    deps = [l for r, l in runs if re.search(r"(^|\s|&&\s*)scripts/install-deps\.sh build(\s|$)", r)]
    builds = [(r, l) for r, l in runs if re.search(r"(^|\s)scripts/build\.sh(\s|$)", r)]
    fail(deps, f"{label}: the build stage must RUN scripts/install-deps.sh build")
    fail(builds, f"{label}: the build stage must RUN scripts/build.sh")
    for r, l in builds:
        m = re.search(r"MHA_TARGETS=(\"[^\"]*\"|'[^']*'|\S+)", r)
        targets = set(m.group(1).strip("\"'").split()) if m else set()
        fail({"mha-server", "mha-client"} <= targets,
             f"{label}:{l}: scripts/build.sh must build MHA_TARGETS=\"mha-server mha-client\"")
        if deps:
            fail(min(deps) < l, f"{label}: install-deps.sh must run before build.sh")
    # Everything taken from the build stage: the two binaries only (plus files the CUDA image
    # needs from /opt, checked by the caller).
    for s in stages:
        for w, r, l in s.instructions:
            if w == "COPY" and "--from" in copy_parts(r)[0]:
                opts, srcs, _ = copy_parts(r)
                if opts["--from"] in (build.name, str(build.index)):
                    for src in srcs:
                        yield_ok = re.search(r"/build/(server/mha-server|client/mha-client)$", src)
                        fail(yield_ok or src.startswith("/opt/"),
                             f"{label}:{l}: COPY --from={opts['--from']} {src}: only the binaries "
                             "may leave the build stage")
    return build


def check_no_syntax_directive(fail, path, label):
    """A `# syntax=` parser directive makes BuildKit fetch that frontend from Docker Hub: no
    offline BuildKit build. The built-in frontend is used without it."""
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            fail(not re.match(r"#\s*syntax\s*=", line.strip(), re.I),
                 f"{label}:{lineno}: no '# syntax=' directive (BuildKit offline)")


def check_smoke_ports(fail, stages, label):
    """A RUN that starts mha-server during the build listens on port 0 (port files), never on
    fixed ports that another build or service on the host may hold."""
    for s in stages:
        for w, r, l in s.instructions:
            if w != "RUN" or not re.search(r"(^|[;&|\s])mha-server\s+(?!--help)", r):
                continue
            for flag in ("--grpc-address", "--metrics-address"):
                fail(re.search(flag + r"[= ]\S*:0(\s|$)", r),
                     f"{label}:{l}: mha-server in the build must use {flag} ...:0")
            fail("--port-file" in r and "--metrics-port-file" in r,
                 f"{label}:{l}: mha-server in the build must write --port-file/--metrics-port-file")
            fail(not re.search(r":(8500|8502)\b", r), f"{label}:{l}: fixed port 8500/8502")


def check_context_copies(fail, stages, repo, patterns, label):
    for s in stages:
        for w, r, l in s.instructions:
            if w not in ("COPY", "ADD"):
                continue
            opts, srcs, _ = copy_parts(r)
            if "--from" in opts:
                continue
            for src in srcs:
                if src == ".":
                    continue
                if any(ch in src for ch in "*?["):
                    continue  # optional globs (Dockerfile.cuda's libtorch*.zip)
                fail(os.path.exists(os.path.join(repo, src)),
                     f"{label}:{l}: COPY source {src} does not exist")
                fail(not ignored(src, patterns), f"{label}:{l}: COPY source {src} is in .dockerignore")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    args = ap.parse_args()
    failures = []

    def fail(cond, what):
        if not cond:
            failures.append(what)

    patterns = dockerignore_patterns(args.repo)
    fail(patterns, ".dockerignore missing or empty")
    for must in (".git", "build", "build-svc", "build-deploy"):
        fail(ignored(must, patterns), f".dockerignore must exclude {must}")
    for needed in ("CMakeLists.txt", "core", "server", "client", "proto", "scripts/build.sh",
                   "scripts/install-deps.sh", "tests/CMakeLists.txt", "bench",
                   "deploy/runtime-packages.txt", "tests/deploy/check_runtime_packages.py",
                   "tests/fixtures/cases/format_safetensors/model.safetensors"):
        fail(not ignored(needed, patterns), f".dockerignore must not exclude {needed}")

    # CPU image.
    path = os.path.join(args.repo, "Dockerfile")
    stages = stages_of(parse(path))
    fail(len(stages) >= 2, "Dockerfile: multi-stage build expected")
    final = chain(stages, stages[-1])
    build = check_common(fail, stages, final, "Dockerfile", slim_ok=True)
    if build:
        fail(build.base == "debian:12", f"Dockerfile: build stage must be debian:12, is {build.base}")
        for w, r, l in build.instructions:
            if w == "RUN":
                fail("apt-get install" not in r and "apt install" not in r,
                     f"Dockerfile:{l}: the build stage installs packages only via "
                     "scripts/install-deps.sh")
        fail(any(w == "RUN" and "check_runtime_packages.py" in r and "runtime-packages.txt" in r
                 for w, r, _ in build.instructions),
             "Dockerfile: the build stage must run check_runtime_packages.py on the binaries")
    # Runtime packages: only the list, through its copied path.
    list_dest = None
    for rest, l in all_instr(final, "COPY"):
        opts, srcs, dest = copy_parts(rest)
        if "--from" not in opts and "deploy/runtime-packages.txt" in srcs:
            list_dest = dest
    fail(list_dest, "Dockerfile: the runtime image must COPY deploy/runtime-packages.txt")
    installs = [(r, l) for r, l in all_instr(final, "RUN") if "apt-get install" in r]
    fail(installs, "Dockerfile: the runtime image installs no packages")
    for r, l in installs:
        fail(list_dest and list_dest in r, f"Dockerfile:{l}: apt-get install must read {list_dest}")
        for seg in re.findall(r"apt-get install([^&;|]*)", r):
            literal = [t for t in seg.split() if not t.startswith(("-", "$", '"$'))]
            fail(not literal, f"Dockerfile:{l}: packages named outside runtime-packages.txt: "
                              f"{literal}")
    check_context_copies(fail, stages, args.repo, patterns, "Dockerfile")
    check_no_syntax_directive(fail, path, "Dockerfile")
    check_smoke_ports(fail, stages, "Dockerfile")
    fail(any(w == "RUN" and "mha-server" in r and "/readyz" in r
             for s in stages for w, r, _ in s.instructions),
         "Dockerfile: a smoke stage must start mha-server and wait for /readyz")

    # CUDA image.
    path = os.path.join(args.repo, "Dockerfile.cuda")
    if os.path.exists(path):
        stages = stages_of(parse(path))
        final = chain(stages, stages[-1])
        build = check_common(fail, stages, final, "Dockerfile.cuda", slim_ok=True)
        if build:
            text = " ".join(r for _, r, _ in build.instructions)
            fail(re.search(r"scripts/build\.sh[^&]*-DCMAKE_PREFIX_PATH=/opt/libtorch", text),
                 "Dockerfile.cuda: scripts/build.sh -DCMAKE_PREFIX_PATH=/opt/libtorch")
            fail(any(w == "ARG" and r.split("=")[0] == "LIBTORCH_URL"
                     for w, r, _ in build.instructions), "Dockerfile.cuda: ARG LIBTORCH_URL")
            fail("check_runtime_packages.py" in text,
                 "Dockerfile.cuda: the build stage must run check_runtime_packages.py")
            fail("tests/wheel/wheel_traps.py needed" in text,
                 "Dockerfile.cuda: the build stage must check the binaries' DT_NEEDED order "
                 "(tests/wheel/wheel_traps.py needed: libstdc++ before LibTorch, docs/gpu.md)")
        fail("MHA_DEVICE=cuda" in " ".join(r for r, _ in all_instr(final, "ENV")),
             "Dockerfile.cuda: ENV MHA_DEVICE=cuda")
        check_context_copies(fail, stages, args.repo, patterns, "Dockerfile.cuda")
        check_no_syntax_directive(fail, path, "Dockerfile.cuda")
        check_smoke_ports(fail, stages, "Dockerfile.cuda")

    for f in failures:
        print("FAIL: " + f)
    if failures:
        return 1
    print("OK: Dockerfile, Dockerfile.cuda and .dockerignore")
    return 0


if __name__ == "__main__":
    sys.exit(main())
