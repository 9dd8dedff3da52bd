#!/usr/bin/env python3
"""The GPU build's guards without a GPU (ctest label "build"; docs/gpu.md, "Three defects").

A PyTorch wheel's LibTorch sets three traps (cmake/MhaTorch.cmake). This script builds a fake
wheel over Debian's LibTorch 1.13 that sets all three, configures the project against it in a
second build folder, and checks that none of them catches the project:

  setup     the fake wheel: Debian's LibTorch headers under an include root salted like the
            wheel's (google/protobuf/*.h and fmt/*.h that #error), a library exporting poisoned
            std::filesystem functions linked as a LibTorch library, and a TorchConfig.cmake that
            defines protobuf::libprotobuf as an empty target, as the wheel's Caffe2Config does;
            then the guard build is configured against it and its .pb.h files generated
  headers   under the include path of every translation unit of the guard build that sees
            LibTorch's dirs, a probe of <google/protobuf/message.h> and <fmt/core.h> takes no
            salted header (trap 1); a control with the salted root first does
  protobuf  the link commands of mha-server and mha-client name the protobuf library (trap 3)
  stdcxx    mha_core_tests, linked by the guard build's link command (the poisoned library in
            LibTorch's place) over the main build's objects, passes the suites that crashed on
            the H200; a control program linked without the fix calls the poison (trap 2)
  needed    every binary of the main build that needs a LibTorch library has libstdc++.so.6 (and
            libprotobuf, where it needs it) ahead of it in its DT_NEEDED order (trap 2)

  wheel_traps.py STEP --source SRC --build MAIN_BUILD --guard GUARD_DIR
"""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

TEMP_DIR_SUITES = ("LoaderFixtures.*:WeightsFormat.*:LoaderPrefix.*:LoaderLayouts.*:"
                   "LoaderConfig.*:Safetensors.*:TorchSaveFormat.*")
POISON = "libmha_poison_stdcxx.so"


def fail(msg):
    print(f"wheel-traps: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def run(cmd, **kw):
    return subprocess.run(cmd, check=False, text=True, capture_output=True, **kw)


def cache_value(build, key):
    for line in open(os.path.join(build, "CMakeCache.txt"), errors="replace"):
        if line.startswith(key + ":"):
            return line.split("=", 1)[1].strip()
    return None


# ---- setup ----------------------------------------------------------------------------------
def salt(include_root, system_include):
    """google/protobuf and fmt of the system, each header replaced by an #error."""
    count = 0
    for lib in ("google/protobuf", "fmt"):
        for base, _, files in os.walk(os.path.join(system_include, lib)):
            for f in files:
                rel = os.path.relpath(os.path.join(base, f), system_include)
                dst = os.path.join(include_root, rel)
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                with open(dst, "w") as out:
                    out.write(f'#error "wheel trap 1: <{rel}> came from LibTorch\'s include root"\n')
                count += 1
    return count


def poison_library(lib_dir, work):
    """A shared library whose std::filesystem functions (all libstdc++ exports) abort."""
    libstdcxx = run(["g++", "-print-file-name=libstdc++.so.6"]).stdout.strip()
    nm = run(["nm", "-D", "--defined-only", libstdcxx]).stdout
    names = sorted({m.group(1) for m in re.finditer(r" T (_ZN?K?St10filesystem\S*)", nm)})
    names = [n.split("@")[0] for n in names]
    if not names:
        fail(f"no std::filesystem functions found in {libstdcxx}")
    asm = [".text"]
    for i, n in enumerate(dict.fromkeys(names)):
        asm += [f".globl {n}", f".type {n},@function", f"{n}:",
                f"  leaq .Lname{i}(%rip), %rdi", "  jmp mha_poisoned@PLT",
                ".section .rodata", f".Lname{i}: .asciz \"{n}\"", ".text"]
    asm.append('.section .note.GNU-stack,"",@progbits')
    with open(os.path.join(work, "stubs.s"), "w") as f:
        f.write("\n".join(asm) + "\n")
    with open(os.path.join(work, "poisoned.c"), "w") as f:
        f.write('#include <stdio.h>\n#include <stdlib.h>\n'
                'void mha_poisoned(const char* name) {\n'
                '  fprintf(stderr, "wheel trap 2: %s was bound to the poisoned library, not '
                'libstdc++\\n", name);\n  abort();\n}\n')
    r = run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{POISON}", "-o", os.path.join(lib_dir, POISON),
             os.path.join(work, "poisoned.c"), os.path.join(work, "stubs.s")])
    if r.returncode:
        fail("building the poisoned library:\n" + r.stderr)
    return len(names)


TORCH_CONFIG = """# A PyTorch wheel's LibTorch, emulated over Debian's (tests/wheel/wheel_traps.py).
# Trap 3: the wheel's Caffe2Config.cmake makes protobuf::libprotobuf an empty target if none exists.
if(NOT TARGET protobuf::libprotobuf)
  add_library(mha_wheel_dummy INTERFACE)
  add_library(protobuf::libprotobuf ALIAS mha_wheel_dummy)
endif()
include("{real_config}")
get_filename_component(TORCH_INSTALL_PREFIX "${{CMAKE_CURRENT_LIST_DIR}}/../../.." ABSOLUTE)
# Trap 1: the include root holds bundled third-party headers (salted here).
set(TORCH_INCLUDE_DIRS "${{TORCH_INSTALL_PREFIX}}/include"
  "${{TORCH_INSTALL_PREFIX}}/include/torch/csrc/api/include")
set_target_properties(torch PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${{TORCH_INCLUDE_DIRS}}")
# The wheel's Caffe2Targets.cmake gives c10, torch_cpu (and torch_cuda, c10_cuda) the include root
# as well, "${{_IMPORT_PREFIX}}/include"; torch_library and torch_cpu_library pass torch_cpu's on
# through $<TARGET_PROPERTY:torch_cpu,INTERFACE_INCLUDE_DIRECTORIES> (how it reached the units on
# the H200 after torch's own dirs were filtered).
foreach(t c10 torch_cpu)
  if(TARGET ${{t}})
    set_target_properties(${{t}} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${{TORCH_INSTALL_PREFIX}}/include")
  endif()
endforeach()
# Trap 2: a LibTorch library exports libstdc++'s std::filesystem (poisoned here). Needed by every
# binary that links LibTorch, as libtorch.so is (TorchConfig links it --no-as-needed).
set_property(TARGET torch APPEND PROPERTY INTERFACE_LINK_LIBRARIES
  "-Wl,--no-as-needed,${{TORCH_INSTALL_PREFIX}}/lib/{poison}")
"""


def setup(a):
    real_dir = cache_value(a.build, "Torch_DIR")
    if not real_dir or not os.path.isdir(real_dir):
        fail(f"no Torch_DIR in {a.build}/CMakeCache.txt")
    real_include = os.path.join(os.path.abspath(os.path.join(real_dir, "../../../..")), "include")
    shutil.rmtree(a.guard, ignore_errors=True)
    root = os.path.join(a.guard, "wheel", "torch")
    inc, lib, cfg = (os.path.join(root, d) for d in ("include", "lib", "share/cmake/Torch"))
    for d in (inc, lib, cfg):
        os.makedirs(d)
    for entry in ("ATen", "c10", "caffe2", "torch"):
        if os.path.exists(os.path.join(real_include, entry)):
            os.symlink(os.path.join(real_include, entry), os.path.join(inc, entry))
    salted = salt(inc, "/usr/include")
    poisoned = poison_library(lib, a.guard)
    with open(os.path.join(cfg, "TorchConfig.cmake"), "w") as f:
        f.write(TORCH_CONFIG.format(real_config=os.path.join(real_dir, "TorchConfig.cmake"),
                                    poison=POISON))
    print(f"wheel-traps: fake wheel at {root}: {salted} salted headers, "
          f"{poisoned} poisoned std::filesystem functions")
    gbuild = os.path.join(a.guard, "build")
    r = run(["cmake", "-S", a.source, "-B", gbuild, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
             f"-DTorch_DIR={cfg}"])
    print(r.stdout[-3000:])
    if r.returncode:
        fail("configuring against the fake wheel:\n" + r.stderr[-4000:])
    outs = [line.split(":")[0] for line in run(["ninja", "-C", gbuild, "-t", "targets", "all"])
            .stdout.splitlines() if re.match(r"^\S+\.pb\.h:", line)]
    r = run(["ninja", "-C", gbuild] + outs)
    if r.returncode:
        fail("generating the protobuf headers:\n" + r.stdout[-3000:])
    print(f"wheel-traps: guard build configured, {len(outs)} generated headers")


# ---- headers --------------------------------------------------------------------------------
def preprocess_command(entry):
    args = shlex.split(entry["command"])
    out, skip = [], False
    for i, x in enumerate(args):
        if skip:
            skip = False
            continue
        if x in ("-o", "-MT", "-MF", "-MQ"):
            skip = True
            continue
        if x in ("-MD", "-MMD", "-c"):
            continue
        out.append(x)
    return out + ["-E", "-o", os.devnull]


def include_flags(entry):
    """A unit's command less its source file and outputs: what decides where a header comes from."""
    cmd = preprocess_command(entry)
    return tuple(x for x in cmd if x != entry["file"] and
                 os.path.abspath(os.path.join(entry["directory"], x)) != entry["file"])


def probe(flags, directory, work):
    """Preprocesses a unit that includes one salted header of each library under FLAGS: the
    compiler's own search decides, as it would for any unit of that target."""
    src = os.path.join(work, "probe.cc")
    with open(src, "w") as f:
        f.write("#include <google/protobuf/message.h>\n#include <fmt/core.h>\n")
    return run(list(flags) + [src], cwd=directory)


def headers(a):
    gbuild = os.path.join(a.guard, "build")
    entries = json.load(open(os.path.join(gbuild, "compile_commands.json")))
    # Only units whose include path has one of LibTorch's dirs (the salted root itself, or the
    # filtered view of it) can take a header from there; the others are not probed.
    salted_root = os.path.join(a.guard, "wheel", "torch", "include")
    seeing = [e for e in entries if salted_root in e["command"] or "torch-include" in e["command"]]
    if not seeing:
        fail("no compile command sees the fake wheel's include root: the guard would prove nothing")
    # Where <x> comes from depends only on the include path (and the defines and options beside
    # it), not on the unit: one probe per distinct command covers every unit that has it, and
    # covers it whatever the unit includes now or later.
    groups = {}
    for e in seeing:
        groups.setdefault((include_flags(e), e["directory"]), []).append(e["file"])
    work = os.path.join(a.guard, "probe")
    os.makedirs(work, exist_ok=True)
    # The control: the salted root first on the first command's include path must be caught.
    (flags, directory), _ = next(iter(groups.items()))
    control = probe((flags[0], f"-I{salted_root}") + flags[1:], directory, work)
    if control.returncode == 0 or "wheel trap 1" not in control.stderr:
        fail("the probe took no salted header with the salted root first: it would prove nothing")
    bad = []
    for (flags, directory), files in groups.items():
        r = probe(flags, directory, work)
        if r.returncode:
            first = next((l for l in r.stderr.splitlines() if "error" in l), r.stderr[:300])
            bad.append(f"{len(files)} units, e.g. {os.path.relpath(files[0], a.source)}: {first}")
    for b in bad:
        print(b)
    if bad:
        fail(f"{len(bad)} of {len(groups)} include paths that see LibTorch's dirs reach a salted "
             "header")
    print(f"wheel-traps: {len(seeing)} of {len(entries)} translation units see LibTorch's include "
          f"dirs, through {len(groups)} distinct commands; under each, <google/protobuf/message.h> "
          "and <fmt/core.h> came from the system (the control with the salted root first took "
          "the salted ones)")


# ---- protobuf -------------------------------------------------------------------------------
def link_command(gbuild, target):
    """The compiler invocation that links <target> (CMake chains it with ':' and POST_BUILD steps)."""
    r = run(["ninja", "-C", gbuild, "-t", "commands", target])
    if r.returncode:
        fail(f"no link command for {target}: {r.stderr.strip()}")
    last = r.stdout.strip().splitlines()[-1]
    for part in last.split(" && "):
        if f" -o {target} " in f" {part.strip()} ":
            return part.strip()
    fail(f"no '-o {target}' in the last command for {target}")


def protobuf(a):
    gbuild = os.path.join(a.guard, "build")
    lib = cache_value(gbuild, "Protobuf_LIBRARY_RELEASE") or cache_value(gbuild, "Protobuf_LIBRARY")
    if not lib:
        fail("the guard build found no protobuf library")
    for target in ("server/mha-server", "client/mha-client"):
        if lib not in link_command(gbuild, target).split():
            fail(f"{target}'s link command does not name {lib}: protobuf::libprotobuf was the "
                 f"wheel's empty target")
        print(f"wheel-traps: {target} links {lib}")


# ---- stdcxx ---------------------------------------------------------------------------------
def needed(binary):
    out = run(["readelf", "-d", binary]).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def control(a, lib_dir):
    """Without the fix (the driver's -lstdc++ last), a program's std::filesystem call is poisoned."""
    src = os.path.join(a.guard, "control.cc")
    exe = os.path.join(a.guard, "control")
    with open(src, "w") as f:
        f.write("#include <filesystem>\n#include <system_error>\nint main() {\n"
                "  std::error_code ec;\n"
                "  std::filesystem::remove_all(\"/nonexistent/wheel-traps\", ec);\n}\n")
    r = run(["g++", "-std=c++17", src, "-o", exe, os.path.join(lib_dir, POISON),
             f"-Wl,-rpath,{lib_dir}"])
    if r.returncode:
        fail("building the control program:\n" + r.stderr)
    r = run([exe])
    if r.returncode == 0 or "wheel trap 2" not in r.stderr:
        fail(f"the control program was not poisoned (rc {r.returncode}): the guard cannot fail")
    print("wheel-traps: control: linked the way 1dbf4d4 linked, std::filesystem::remove_all "
          "was bound to the poisoned library")


def stdcxx(a):
    gbuild = os.path.join(a.guard, "build")
    lib_dir = os.path.join(a.guard, "wheel", "torch", "lib")
    control(a, lib_dir)
    target = "tests/unit/mha_core_tests"
    exe = os.path.join(a.guard, "mha_core_tests.poisoned")
    cmd = link_command(gbuild, target).replace(f" -o {target} ", f" -o {shlex.quote(exe)} ")
    r = subprocess.run(cmd, shell=True, cwd=a.build, text=True, capture_output=True)
    if r.returncode:
        fail(f"relinking {target} over {a.build}'s objects:\n{r.stderr[-3000:]}")
    if POISON not in [os.path.basename(n) for n in needed(exe)]:
        fail(f"{exe} does not need {POISON}: the guard would prove nothing")
    imports = run(["nm", "-D", "--undefined-only", exe]).stdout
    if "St10filesystem" not in imports:
        fail(f"{exe} imports no std::filesystem function: the guard would prove nothing")
    env = dict(os.environ, LD_LIBRARY_PATH=lib_dir + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
    r = run([exe, f"--gtest_filter={TEMP_DIR_SUITES}", "--gtest_brief=1"], env=env, cwd=a.guard)
    print(r.stdout[-2000:], r.stderr[-2000:])
    if r.returncode:
        fail(f"{target} linked with the poisoned library in LibTorch's place exited {r.returncode}")
    print(f"wheel-traps: {target} with {POISON} in LibTorch's place passed {TEMP_DIR_SUITES}")
    stdcxx_static(a, cmd, exe, target, env)


def stdcxx_static(a, cmd, exe, target, env):
    """The same with a toolchain whose libstdc++ is static (GCC --with-static-standard-libraries, or
    no libstdc++.so; the H200's /opt/gcc crashed with libstdc++ first on the link line): an archive
    first on the line gives nothing (nothing is undefined yet), so libtorch's exported copy would
    win; the -u of one symbol per std::filesystem member makes the binary hold its own."""
    grouped = " -lstdc++ -Wl,--pop-state"
    if grouped not in cmd:
        fail(f"{target}'s link command has no '-lstdc++' in the push-state group: {cmd[:400]}")
    static_exe = exe + ".static"
    static_cmd = (cmd.replace(grouped, " -Wl,-Bstatic -lstdc++ -Wl,-Bdynamic -Wl,--pop-state")
                  .replace(f" -o {shlex.quote(exe)} ", f" -static-libstdc++ -o {shlex.quote(static_exe)} "))
    r = subprocess.run(static_cmd, shell=True, cwd=a.build, text=True, capture_output=True)
    if r.returncode:
        fail(f"relinking {target} with a static libstdc++:\n{r.stderr[-3000:]}")
    if "libstdc++" in " ".join(needed(static_exe)):
        fail(f"{static_exe} still needs libstdc++.so: the static variant would prove nothing")
    r = run([static_exe, f"--gtest_filter={TEMP_DIR_SUITES}", "--gtest_brief=1"], env=env, cwd=a.guard)
    print(r.stdout[-1000:], r.stderr[-2000:])
    if r.returncode:
        fail(f"{target} with a static libstdc++ and {POISON} in LibTorch's place exited {r.returncode}")
    print(f"wheel-traps: the same with a static libstdc++ passed")


# ---- needed ---------------------------------------------------------------------------------
def is_torch(name):
    return name.startswith(("libtorch", "libc10", "libcaffe2"))


def needed_order(a):
    checked, bad = 0, []
    guard = os.path.realpath(a.guard)
    for base, dirs, files in os.walk(a.build):
        if os.path.realpath(base).startswith(guard):
            dirs[:] = []
            continue
        for f in files:
            path = os.path.join(base, f)
            if not os.access(path, os.X_OK) or f.endswith((".so", ".sh", ".py")):
                continue
            with open(path, "rb") as fh:
                if fh.read(4) != b"\x7fELF":
                    continue
            deps = needed(path)
            torch = [i for i, d in enumerate(deps) if is_torch(d)]
            if not torch:
                continue
            checked += 1
            rel = os.path.relpath(path, a.build)
            for lib in ("libstdc++.so.6", "libprotobuf.so"):
                at = next((i for i, d in enumerate(deps) if d.startswith(lib)), None)
                if at is None and lib.startswith("libstdc++"):
                    bad.append(f"{rel}: no {lib}")
                elif at is not None and at > torch[0]:
                    bad.append(f"{rel}: {deps[torch[0]]} (#{torch[0]}) before {deps[at]} (#{at})")
    for b in bad:
        print(b)
    if not checked:
        fail(f"no binary under {a.build} needs LibTorch: the guard would prove nothing")
    if bad:
        fail(f"{len(bad)} binaries bind LibTorch before the system's library")
    print(f"wheel-traps: {checked} binaries need LibTorch; libstdc++.so.6 (and libprotobuf) "
          f"come first in every one")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("step", choices=["setup", "headers", "protobuf", "stdcxx", "needed"])
    p.add_argument("--source", required=True)
    p.add_argument("--build", required=True)
    p.add_argument("--guard", required=True)
    a = p.parse_args()
    a.source, a.build, a.guard = (os.path.abspath(x) for x in (a.source, a.build, a.guard))
    {"setup": setup, "headers": headers, "protobuf": protobuf, "stdcxx": stdcxx,
     "needed": needed_order}[a.step](a)


if __name__ == "__main__":
    main()
