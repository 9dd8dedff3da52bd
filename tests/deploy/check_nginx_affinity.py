#!/usr/bin/python3
"""deploy/proxy/nginx/nginx.conf pins gRPC calls by `x-session-id`, run for real.

Debian's nginx runs the shipped file on loopback; only its listen port and the upstream's
`server` lines are replaced (a free port; three gRPC stub backends of python3-grpcio on
127.0.0.1, port 0, each answering its own name). No mha-server is needed: this tests the proxy,
not the sessions (tests/service/proxy_affinity_test.cc puts real replicas behind the same file).
  1. 47 session ids x 3 calls: every id always reaches one backend, the metadata arrives, and
     the ids are spread over more than one backend;
  2. calls without the header are spread too (nginx uses round-robin for an empty hash key);
  3. the backend with most ids stops: 0 failed calls (grpc_next_upstream), its ids move to one
     other backend each, and no other id moves (consistent hashing);
  4. self-check: the same file without the `hash` line (round-robin) must fail check 1.
nginx is stopped by PID (SIGTERM), the backends in-process; bounded waits only.

  check_nginx_affinity.py --repo . [--nginx nginx]
"""
import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent import futures

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import procs  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import loopback_ports  # noqa: E402

try:
    import grpc
except ImportError:
    sys.exit("FAIL: python3-grpcio missing; run scripts/install-deps.sh test")

SERVICE, METHOD = "mha.test.Affinity", "Who"
# 47: not a multiple of the 3 backends, so that round-robin cannot look like affinity.
IDS = [f"session-{i:03d}" for i in range(47)]
ROUNDS = 3


class Backend:
    """A gRPC server on 127.0.0.1:0 whose one method answers '<name> <x-session-id>'."""

    def __init__(self, name):
        self.name = name

        def who(request, context):
            md = dict(context.invocation_metadata())
            return f"{name} {md.get('x-session-id', '')}".encode()

        handler = grpc.method_handlers_generic_handler(
            SERVICE, {METHOD: grpc.unary_unary_rpc_method_handler(who)})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                                  options=[("grpc.so_reuseport", 0)])
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def stop(self):
        self.server.stop(None).wait(10)


def rewrite(text, port, backends, keep_hash=True):
    """The shipped config with our listen port and backends (and, for the self-check, no hash)."""
    out, n = re.subn(r"listen\s+127\.0\.0\.1:\d+\s+http2;", f"listen 127.0.0.1:{port} http2;", text)
    if n != 1:
        raise SystemExit("FAIL: nginx.conf: expected one `listen 127.0.0.1:PORT http2;` line")
    servers = [m for m in re.finditer(r"^(\s*)server\s+127\.0\.0\.1:\d+([^;]*);\n", out, re.M)]
    if len(servers) < 2:
        raise SystemExit("FAIL: nginx.conf: expected the upstream's 127.0.0.1 server lines")
    indent, params = servers[0].group(1), servers[0].group(2)
    lines = "".join(f"{indent}server 127.0.0.1:{b.port}{params};\n" for b in backends)
    out = out[:servers[0].start()] + lines + out[servers[-1].end():]
    if not keep_hash:
        out, n = re.subn(r"^\s*hash\s+\$http_x_session_id\s+consistent;\n", "", out, flags=re.M)
        if n != 1:
            raise SystemExit("FAIL: nginx.conf: no hash line to remove for the self-check")
    return out


class Nginx:
    def __init__(self, exe, text, tmp):
        self.conf = os.path.join(tmp, "nginx.conf")
        with open(self.conf, "w") as f:
            f.write(text)
        self.log = open(os.path.join(tmp, "nginx.log"), "w")
        self.proc = subprocess.Popen([exe, "-p", tmp + "/", "-e", "stderr", "-c", self.conf,
                                      "-g", "daemon off;"], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        self.tmp = tmp

    def wait_listening(self, port, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline and self.proc.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                time.sleep(0.05)
        return False

    def output(self):
        self.log.flush()
        return open(os.path.join(self.tmp, "nginx.log"), errors="replace").read()[-3000:]

    def stop(self):
        procs.stop(self.proc, timeout=30)
        self.log.close()


def call(stub, sid):
    """(backend name, error) of one call through the proxy."""
    md = [("x-session-id", sid)] if sid is not None else None
    try:
        reply = stub(b"", metadata=md, timeout=10).decode()
    except grpc.RpcError as e:
        return None, f"{e.code().name}: {e.details()}"
    name, _, echoed = reply.partition(" ")
    if sid is not None and echoed != sid:
        return name, f"the backend saw x-session-id {echoed!r}, sent {sid!r}"
    return name, None


def owners(stub, ids, rounds, errors):
    seen = {sid: set() for sid in ids}
    for _ in range(rounds):
        for sid in ids:
            name, err = call(stub, sid)
            if err:
                errors.append(f"{sid}: {err}")
            if name:
                seen[sid].add(name)
    return seen


def run(exe, text, keep_hash=True):
    """Failures of checks 1-3 (1 only when keep_hash is False)."""
    failures = []
    backends = [Backend(f"replica-{i}") for i in range(3)]
    port = loopback_ports.pick_free_port()
    with tempfile.TemporaryDirectory() as tmp:
        nginx = Nginx(exe, rewrite(text, port, backends, keep_hash), tmp)
        channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.enable_http_proxy", 0)])
        try:
            if not nginx.wait_listening(port):
                return [f"nginx did not listen on 127.0.0.1:{port}:\n{nginx.output()}"]
            stub = channel.unary_unary(f"/{SERVICE}/{METHOD}")
            errors = []
            before = owners(stub, IDS, ROUNDS, errors)
            split = sorted(s for s, o in before.items() if len(o) != 1)
            if split:
                failures.append(f"{len(split)} of {len(IDS)} session ids reached several "
                                f"backends, e.g. {split[0]}: {sorted(before[split[0]])}")
            load = {b.name: sum(1 for o in before.values() if o == {b.name}) for b in backends}
            print(f"{'hash' if keep_hash else 'no hash'}: ids per backend {load}, "
                  f"{len(errors)} failed calls")
            if sum(1 for v in load.values() if v) < 2:
                failures.append(f"the session ids were not spread: {load}")
            if not keep_hash:
                return failures + errors
            plain = [call(stub, None) for _ in range(12)]
            spread = {n for n, _ in plain if n}
            errors += [e for _, e in plain if e]
            if len(spread) < 2:
                failures.append(f"calls without x-session-id all reached {spread}")
            victim = max(backends, key=lambda b: load[b.name])
            victim.stop()
            after = owners(stub, IDS, ROUNDS, errors)
            moved = stayed = 0
            for sid in IDS:
                was, now = before[sid], after[sid]
                if was == {victim.name}:
                    moved += 1
                    if len(now) != 1 or victim.name in now:
                        failures.append(f"{sid} (on the stopped {victim.name}) now reaches {sorted(now)}")
                elif now != was:
                    failures.append(f"{sid} moved from {sorted(was)} to {sorted(now)} though its "
                                    "backend still runs (the hash is not consistent)")
                else:
                    stayed += 1
            print(f"{victim.name} stopped: {moved} ids moved, {stayed} stayed, "
                  f"{len(errors)} failed calls in all")
            return failures + errors
        finally:
            channel.close()
            nginx.stop()
            for b in backends:
                b.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--nginx", default=os.environ.get("MHA_NGINX", "nginx"))
    args = ap.parse_args()
    exe = shutil.which(args.nginx) or (args.nginx if os.path.isfile(args.nginx) else None)
    if not exe:
        print(f"FAIL: {args.nginx} not found; `scripts/install-deps.sh test` installs nginx")
        return 1
    text = open(os.path.join(args.repo, "deploy/proxy/nginx/nginx.conf")).read()
    failures = run(exe, text)
    if not run(exe, text, keep_hash=False):
        failures.append("self-check: without the hash line the affinity check still passed")
    for f in failures[:30]:
        print("FAIL: " + f)
    if failures:
        return 1
    print("OK: nginx.conf pins sessions by x-session-id, spreads the rest, and moves only the "
          "sessions of a stopped backend")
    return 0


if __name__ == "__main__":
    sys.exit(main())
