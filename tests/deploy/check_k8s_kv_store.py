"""The shared KV store in deploy/k8s (deploy/k8s/redis, included by the base), checked with the
rendered overlay by check_k8s.py: one Redis StatefulSet that refuses writes at maxmemory
(noeviction: a block a record names is never dropped) and keeps an append-only file on a volume,
its password from the Secret the servers read too; its Services select its pods on its port; the
server's --kv-store (server.toml) names that Service and port; the password is a file of a
read-only Secret volume, never a value in the manifests."""
import re

REDIS_PORT = 6379
SECRET = "mha-serve-redis"


def _get(d, *path, default=None):
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return default
        d = d[p]
    return d


def _selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _toml(text, key):
    m = re.search(r'^' + re.escape(key) + r'\s*=\s*"?([^"\n]*)"?', text, re.MULTILINE)
    return m.group(1).strip() if m else None


def check(c, by_kind, config_text, mounts, volumes):
    sets = by_kind.get("StatefulSet", [])
    if not c.check(len(sets) == 1, "exactly one StatefulSet (the shared KV store)"):
        return
    sts = sets[0]
    pod = sts["spec"]["template"]
    labels = _get(pod, "metadata", "labels", default={})
    c.check(_selects(_get(sts, "spec", "selector", "matchLabels"), labels),
            "KV store: StatefulSet selector does not match its pods")
    ctr = (_get(pod, "spec", "containers", default=[]) or [{}])[0]
    ports = {p.get("name"): p.get("containerPort") for p in ctr.get("ports", [])}
    c.check(ports.get("redis") == REDIS_PORT, f"KV store: container port redis {REDIS_PORT}")
    command = " ".join(ctr.get("command", []) + ctr.get("args", []))
    c.check("--maxmemory-policy noeviction" in command,
            "KV store: --maxmemory-policy noeviction (never drop a block a record names)")
    c.check("--appendonly yes" in command, "KV store: --appendonly yes (a restart keeps sessions)")
    c.check("--requirepass" in command, "KV store: --requirepass")
    env = {e["name"]: e for e in ctr.get("env", [])}
    c.check(all("value" not in e for e in env.values() if "PASS" in e["name"]),
            "KV store: the password must come from a Secret, not a value")
    c.check(any(_get(e, "valueFrom", "secretKeyRef", "name") == SECRET for e in env.values()),
            f"KV store: the password from Secret {SECRET}")
    c.check(_get(pod, "spec", "securityContext", "runAsNonRoot") is True,
            "KV store: runAsNonRoot")
    c.check(any(m.get("mountPath") == "/data" for m in ctr.get("volumeMounts", [])) and
            any(_get(t, "metadata", "name") == "data"
                for t in _get(sts, "spec", "volumeClaimTemplates", default=[])),
            "KV store: /data on a volume claim")
    services = [s for s in by_kind.get("Service", [])
                if _selects(_get(s, "spec", "selector"), labels)]
    c.check(any(_get(s, "spec", "clusterIP") == "None" and
                s["metadata"]["name"] == _get(sts, "spec", "serviceName") for s in services),
            "KV store: the headless Service named by serviceName")
    for s in services:
        for p in _get(s, "spec", "ports", default=[]):
            c.check(p.get("targetPort") in ("redis", REDIS_PORT),
                    f"KV store: Service {s['metadata']['name']} targets the redis port")
    url = _toml(config_text, "kv-store")
    m = re.fullmatch(r"redis://([A-Za-z0-9.-]+):(\d+)(/\d+)?", url or "")
    if c.check(m is not None, f"server.toml kv-store must be redis://host:port[/db], got {url!r}"):
        host, port = m.group(1).split(".")[0], int(m.group(2))
        c.check(any(s["metadata"]["name"] == host and _get(s, "spec", "clusterIP") != "None" and
                    any(p.get("port") == port for p in s["spec"]["ports"]) for s in services),
                f"kv-store {url}: no ClusterIP Service {host} of the KV store on port {port}")
    path = _toml(config_text, "kv-store-password-file") or ""
    mount = next((mt for p, mt in mounts.items() if path.startswith(p.rstrip("/") + "/")), None)
    c.check(mount is not None and mount.get("readOnly") is True and
            _get(volumes.get(mount["name"], {}), "secret", "secretName") == SECRET,
            f"kv-store-password-file {path!r} is not on the read-only Secret volume {SECRET}")
