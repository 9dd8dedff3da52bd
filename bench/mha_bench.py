"""What bench/'s Python drivers share (run_all.py and its rows, c32_breakdown.py, gpu_rows.py):
an mha-server started on loopback and awaited until health says SERVING, stopped at exit
whatever happens; a program's last output line read as JSON, its failures kept; the server's
Prometheus samples; the load average. Speed is measured with these, never asserted."""
import atexit, json, os, re, signal, subprocess, sys, tempfile, time, urllib.request

_servers = []  # every Server started, stopped at exit (and on SIGTERM: gpu-check's step cap)


def loadavg():
    """The 1, 5 and 15 minute load averages, as strings."""
    return open("/proc/loadavg").read().split()[:3]


def run_json(args, failures, timeout=None, env=None, whole=False, errors_expected=False):
    """The last stdout line of `args` (whole: all of stdout) as JSON; None, with the reason
    appended to `failures`, when the program printed none. A non-zero exit with JSON is a failure
    too (its first_error said), unless errors_expected (a run whose late calls fail by design)."""
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        failures.append(f"{os.path.basename(args[0])}: timed out after {timeout} s")
        return None
    try:
        out = json.loads(r.stdout if whole else r.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        failures.append(f"{' '.join(args[:6])}...: rc {r.returncode}: "
                        f"{(r.stderr or r.stdout).strip()[-400:]}")
        return None
    if r.returncode != 0 and not errors_expected:
        first = out.get("first_error") if isinstance(out, dict) else None
        failures.append(f"{' '.join(args[:6])}...: rc {r.returncode} "
                        f"({first or r.stderr.strip()[-200:]})")
    return out


def prometheus_samples(text, name):
    """Every sample of metric `name` in a Prometheus text exposition: [(labels, value)]."""
    out = []
    for m in re.finditer(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
        out.append((labels, float(m.group(2))))
    return out


class Server:
    """An mha-server on loopback (`binary`, `flags`), ready once `client health` answers SERVING.

    metrics: serve /metrics on a port of its own (metrics_url); http: serve REST (http_port);
    else both are off. exit_on_failure: a server that does not start ends the driver with its
    log's tail (else RuntimeError)."""

    def __init__(self, binary, client, flags=(), metrics=True, http=False, log_level="warn",
                 env=None, timeout_s=300, exit_on_failure=True):
        self.client, self.env, self.exit_on_failure = client, env, exit_on_failure
        self.dir = tempfile.mkdtemp(prefix="mha-bench-")
        port_file = os.path.join(self.dir, "port")
        args = [binary, "--grpc-address", "127.0.0.1:0", "--port-file", port_file,
                "--log-level", log_level]
        metrics_file = os.path.join(self.dir, "metrics-port")
        http_file = os.path.join(self.dir, "http-port")
        args += (["--metrics-address", "127.0.0.1:0", "--metrics-port-file", metrics_file]
                 if metrics else ["--metrics-address", ""])
        args += (["--http-address", "127.0.0.1:0", "--http-port-file", http_file]
                 if http else ["--http-address", ""])
        self.log_path = os.path.join(self.dir, "server.log")
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen([*args, *flags], stdout=open(self.log_path, "w"),
                                     stderr=subprocess.STDOUT, env=env)
        self.pid = self.proc.pid
        _servers.append(self)
        deadline = self.t0 + timeout_s
        while not (os.path.exists(port_file) and open(port_file).read().endswith("\n")):
            self._check(deadline, "did not start")
            time.sleep(0.05)
        self.target = "127.0.0.1:" + open(port_file).read().strip()
        while subprocess.run([client, "-a", self.target, "health"], capture_output=True,
                             env=env).returncode:
            self._check(deadline, "never said SERVING")
            time.sleep(0.05)
        self.ready_s = time.monotonic() - self.t0
        self.metrics_url = (f"http://127.0.0.1:{open(metrics_file).read().strip()}/metrics"
                            if metrics else None)
        self.http_port = int(open(http_file).read().strip()) if http else None

    def _check(self, deadline, what):
        if self.proc.poll() is None and time.monotonic() <= deadline:
            return
        self.stop()
        message = f"mha-server {what}: {self.log()[-2000:]}"
        if self.exit_on_failure:
            sys.exit(message)
        raise RuntimeError(message)

    def log(self):
        return open(self.log_path, errors="replace").read()

    def metrics(self):
        return urllib.request.urlopen(self.metrics_url, timeout=10).read().decode()

    def metric_sum(self, name, **labels):
        """The sum of metric `name`'s samples whose labels include `labels`."""
        return sum(v for l, v in prometheus_samples(self.metrics(), name)
                   if all(l.get(k) == x for k, x in labels.items()))

    def mha_client(self, *args):
        """mha-client's argument list against this server."""
        return [self.client, "-a", self.target, *args]

    def stop(self, timeout_s=30):
        """SIGTERM, then SIGKILL after `timeout_s`; the server's exit code."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def stop_all():
    """Stops every Server this process started."""
    for s in _servers:
        s.stop()


atexit.register(stop_all)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # atexit then stops the servers
