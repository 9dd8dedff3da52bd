#!/usr/bin/python3
"""The server configuration the deployment passes is one mha-server accepts and applies.

CLI11 ignores unknown keys in a --config file and the server ignores unknown MHA_* variables, so a
typo would silently do nothing. This test:
  1. reads the flags and their environment names from `mha-server --help`;
  2. requires every key of deploy/k8s/base/server.toml (the ConfigMap) to be a flag, and every
     MHA_* variable set by the rendered Deployments (cpu, gpu and cpu-tls overlays) and by the
     Dockerfiles' ENV to be a flag's environment name;
  3. starts mha-server with `--config server.toml` (addresses overridden to loopback port 0) and
     compares the values its start-up and shutdown log lines report with the file's;
  4. stops it with SIGTERM by PID.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import tomllib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_k8s import render  # noqa: E402
import procs  # noqa: E402


def parse_toml_flat(path):
    """{key: value as text} of a flat TOML file (what CLI11 reads as flags)."""
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    out = {}
    for key, value in doc.items():
        if isinstance(value, dict):
            sys.exit(f"{path}: [{key}] is a section; mha-server reads flat flag names")
        out[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


def dockerfile_env_names(path):
    names = set()
    text = open(path).read().replace("\\\n", " ")
    for line in text.splitlines():
        m = re.match(r"\s*ENV\s+(.*)", line)
        if m:
            names |= set(re.findall(r"(MHA_[A-Z0-9_]+)=", m.group(1)))
    return names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--kubectl", default=os.environ.get("MHA_KUBECTL", "kubectl"))
    args = ap.parse_args()

    env = {k: v for k, v in os.environ.items() if not k.startswith("MHA_")}
    help_text = subprocess.run([args.server, "--help"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env=env).stdout
    flags = set(re.findall(r"^\s+(--[a-z0-9-]+)", help_text, re.MULTILINE))
    env_names = set(re.findall(r"\(Env:(MHA_[A-Z0-9_]+)\)", help_text))
    if len(flags) < 5 or len(env_names) < 5:
        print(f"FAIL: cannot read flags from `{args.server} --help`:\n{help_text[:1000]}")
        return 1
    failures = []

    toml_path = os.path.join(args.repo, "deploy/k8s/base/server.toml")
    config = parse_toml_flat(toml_path)
    for key in config:
        if "--" + key not in flags:
            failures.append(f"server.toml: '{key}' is not an mha-server flag (CLI11 would ignore it)")

    used_env = {}
    for overlay in ("cpu", "gpu", "cpu-tls"):
        for doc in render(args.kubectl, os.path.join(args.repo, "deploy/k8s/overlays", overlay)):
            if doc.get("kind") != "Deployment":
                continue
            for c in doc["spec"]["template"]["spec"]["containers"]:
                for e in c.get("env", []):
                    if e["name"].startswith("MHA_"):
                        used_env.setdefault(e["name"], set()).add(f"overlays/{overlay}")
    for fn in ("Dockerfile", "Dockerfile.cuda"):
        path = os.path.join(args.repo, fn)
        if os.path.exists(path):
            for name in dockerfile_env_names(path):
                used_env.setdefault(name, set()).add(fn)
    if not used_env:
        failures.append("no MHA_* variable found in the Deployments and Dockerfiles")
    for name, where in sorted(used_env.items()):
        if name not in env_names:
            failures.append(f"{name} (set in {', '.join(sorted(where))}) is not an mha-server "
                            "flag's environment variable")
    print(f"{len(config)} server.toml keys, {len(used_env)} MHA_* variables checked against "
          f"{len(flags)} flags")

    # Start the server with the file; the log lines show what it applied.
    with tempfile.TemporaryDirectory() as tmp:
        port_file = os.path.join(tmp, "port")
        cmd = [args.server, "--config", toml_path, "--grpc-address", "127.0.0.1:0",
               "--port-file", port_file]
        if "--metrics-address" in flags:
            cmd += ["--metrics-address", "127.0.0.1:0"]
        if "--http-address" in flags:
            cmd += ["--http-address", "127.0.0.1:0"]
        if "kv-store-password-file" in config:  # the Secret the Deployment mounts, here a file
            password_file = os.path.join(tmp, "redis-password")
            with open(password_file, "w") as f:
                f.write("not-the-real-one\n")
            cmd += ["--kv-store-password-file", password_file]
        log_path = os.path.join(tmp, "log")
        with open(log_path, "w") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
            try:
                deadline = time.time() + 120
                while time.time() < deadline and proc.poll() is None and not (
                        os.path.exists(port_file) and open(port_file).read().strip()):
                    time.sleep(0.1)
                started = proc.poll() is None and os.path.exists(port_file)
            finally:
                procs.stop(proc, timeout=60)
        text = open(log_path, errors="replace").read()
    if not started:
        print(f"FAIL: mha-server did not start with --config {toml_path}:\n{text[-3000:]}")
        return 1
    if proc.returncode != 0:
        failures.append(f"mha-server exited {proc.returncode} after SIGTERM")
    # The start-up line reports e.g. max_queue_size=128; shutdown reports "grace period 20 s".
    logged = dict(re.findall(r"\b([a-z_]+)=([^\s\",]+)", text))
    m = re.search(r"grace period ([0-9.]+) s", text)
    if m:
        logged["grace_period_s"] = m.group(1)
    compared = 0
    for key, value in config.items():
        lk = key.replace("-", "_")
        if lk in logged:
            compared += 1
            same = logged[lk] == value
            try:
                same = same or float(logged[lk]) == float(value)
            except ValueError:
                pass
            if not same:
                failures.append(f"server.toml sets {key} = {value} but the server applied "
                                f"{logged[lk]}")
    if "log-format" in config and config["log-format"] == "json":
        compared += 1
        if not re.search(r'^\{"level":', text, re.MULTILINE):
            failures.append("server.toml sets log-format = json but the log is not JSON")
    if compared < 3:
        failures.append(f"only {compared} server.toml values could be compared with the log")
    print(f"{compared} server.toml values compared with what the server logged")
    for f in failures:
        print("FAIL: " + f)
    if failures:
        return 1
    print("OK: the deployment's server configuration is accepted and applied")
    return 0


if __name__ == "__main__":
    sys.exit(main())
