"""Helpers shared by the container checks (Python 3 stdlib only): the tier's Docker engine
(DOCKER_HOST set by tier.sh), published ports, polling, /metrics and safetensors parsing."""
import array
import json
import os
import re
import struct
import subprocess
import sys
import time
import urllib.request

DOCKER = os.environ.get("MHA_DOCKER_CLI", "/usr/bin/docker")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def docker(*args, check=True, timeout=600):
    """Runs the docker CLI against the tier's engine; returns stdout (stripped)."""
    r = subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)}: exit {r.returncode}\n{r.stderr.strip()}")
    return r.stdout.strip()


def logs(name):
    """A container's whole log: the server logs to stderr, which `docker logs` keeps apart."""
    r = subprocess.run([DOCKER, "logs", name], capture_output=True, text=True, timeout=120)
    return r.stdout + r.stderr


def remove(*names):
    for n in names:
        docker("rm", "-f", n, check=False)


def published(container, port):
    """The host port Docker published for container port `port` (on 127.0.0.1)."""
    out = docker("port", container, f"{port}/tcp")
    m = re.search(r"127\.0\.0\.1:(\d+)", out)
    if not m:
        raise RuntimeError(f"{container}: port {port} not published on 127.0.0.1: {out!r}")
    return int(m.group(1))


def wait_for(what, fn, timeout, interval=0.25):
    """Polls fn() until it returns a true value; fails with `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            v = fn()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - keep polling, report the last error
            last = e
        time.sleep(interval)
    raise RuntimeError(f"timed out after {timeout} s waiting for {what} (last error: {last})")


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def counter(text, name, **labels):
    """Sum of a Prometheus text-format metric over the series matching `labels`."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        series, _, value = line.rpartition(" ")
        got = dict(re.findall(r'(\w+)="([^"]*)"', series))
        if all(got.get(k) == v for k, v in labels.items()):
            total += float(value)
    return total


def requests_ok(metrics_port):
    """mha_requests_total{code="OK"} of one server, from its /metrics."""
    _, text = http_get(f"http://127.0.0.1:{metrics_port}/metrics")
    return int(counter(text, "mha_requests_total", code="OK"))


def requests_by_code(metrics_port):
    """{code: count} of mha_requests_total of one server."""
    _, text = http_get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2)
    out = {}
    for line in text.splitlines():
        if line.startswith("mha_requests_total{"):
            m = re.search(r'code="([^"]*)"', line)
            if m:
                out[m.group(1)] = out.get(m.group(1), 0) + int(float(line.rpartition(" ")[2]))
    return out


def read_safetensors(path):
    """{name: (shape, array('f'))} for the F32 tensors of a safetensors file."""
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        a, b = info["data_offsets"]
        values = array.array("f")
        values.frombytes(data[8 + n + a:8 + n + b])
        if sys.byteorder != "little":
            values.byteswap()
        out[name] = (info["shape"], values)
    return out


def max_abs_diff(x, y):
    if x[0] != y[0]:
        raise RuntimeError(f"shape {x[0]} != {y[0]}")
    return max((abs(a - b) for a, b in zip(x[1], y[1])), default=0.0)


def run(cmd, timeout=300, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def bench_json(stdout):
    """The JSON object `mha-client bench --json` printed (its last line starting with '{')."""
    lines = [l for l in stdout.splitlines() if l.startswith("{")]
    if not lines:
        raise RuntimeError(f"no JSON in bench output:\n{stdout}")
    return json.loads(lines[-1])
