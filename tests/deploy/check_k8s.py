#!/usr/bin/python3
"""Renders deploy/k8s/overlays/{cpu,gpu,cpu-tls} with `kubectl kustomize` (offline) and checks
what a production rollout of mha-serve relies on. No cluster is involved: this checks the
manifests' content and their internal references (selectors, port names, volumes, the ConfigMap, the HPA's
custom metric), not that an API server accepts them.

  check_k8s.py --repo . [--kubectl kubectl]      (or MHA_KUBECTL=/path/to/kubectl)
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_k8s_kv_store  # noqa: E402
import promql_names  # noqa: E402

GRPC_PORT, METRICS_PORT, UID = 8500, 8502, 10001


def render(kubectl, directory):
    exe = shutil.which(kubectl) or (kubectl if os.path.isfile(kubectl) else None)
    if not exe:
        sys.exit(f"FAIL: {kubectl} not found; `scripts/install-deps.sh test` installs Debian's "
                 "kubernetes-client (kubectl with built-in kustomize)")
    r = subprocess.run([exe, "kustomize", directory], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL: kubectl kustomize {directory}:\n{r.stderr}")
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    if not docs:
        sys.exit(f"FAIL: kubectl kustomize {directory} rendered nothing")
    return docs


class Checker:
    def __init__(self, overlay):
        self.overlay = overlay
        self.failures = []
        self.count = 0

    def check(self, cond, what):
        self.count += 1
        if not cond:
            self.failures.append(f"[{self.overlay}] {what}")
        return cond


def get(d, *path, default=None):
    for p in path:
        if isinstance(d, dict) and p in d:
            d = d[p]
        elif isinstance(d, list) and isinstance(p, int) and p < len(d):
            d = d[p]
        else:
            return default
    return d


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def cpu_cores(q):
    q = str(q)
    return float(q[:-1]) / 1000 if q.endswith("m") else float(q)


def check_overlay(c, docs, repo, gpu, tls=False):
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    for kind in ("Deployment", "Service", "ConfigMap", "PersistentVolumeClaim",
                 "PodDisruptionBudget", "HorizontalPodAutoscaler", "ServiceMonitor",
                 "ServiceAccount"):
        c.check(kind in by_kind, f"no {kind} rendered")
    if not c.check(len(by_kind.get("Deployment", [])) == 1, "exactly one Deployment"):
        return
    dep = by_kind["Deployment"][0]
    pod = dep["spec"]["template"]
    pod_labels = get(pod, "metadata", "labels", default={})
    spec = pod["spec"]
    c.check(selects(get(dep, "spec", "selector", "matchLabels"), pod_labels),
            "Deployment selector does not match its pod labels")
    containers = {x["name"]: x for x in spec["containers"]}
    if not c.check("mha-server" in containers, "no container named mha-server"):
        return
    ctr = containers["mha-server"]

    # Ports.
    ports = {p.get("name"): p for p in ctr.get("ports", [])}
    c.check(get(ports, "grpc", "containerPort") == GRPC_PORT, f"container port grpc {GRPC_PORT}")
    c.check(get(ports, "metrics", "containerPort") == METRICS_PORT,
            f"container port metrics {METRICS_PORT}")

    # Probes: native gRPC liveness/readiness on grpc.health.v1, a generous startup probe. With TLS
    # (native gRPC probes cannot do TLS): HTTP /healthz (liveness) and /readyz on the metrics port.
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        p = ctr.get(probe)
        if not c.check(p is not None, f"{probe} missing"):
            continue
        if tls:
            path = "/healthz" if probe == "livenessProbe" else "/readyz"
            c.check("grpc" not in p and get(p, "httpGet", "path") == path and
                    get(p, "httpGet", "port") in ("metrics", METRICS_PORT),
                    f"TLS: {probe} must be HTTP {path} on the metrics port, not grpc")
        else:
            c.check(get(p, "grpc", "port") == GRPC_PORT,
                    f"{probe} is not a grpc probe on {GRPC_PORT}")
    if not tls:
        c.check(get(ctr, "livenessProbe", "grpc", "service", default="") == "",
                "livenessProbe must check the whole server (service \"\")")
        c.check(get(ctr, "readinessProbe", "grpc", "service") in ("", "mha.v1.AttentionService"),
                "readinessProbe service must be \"\" or mha.v1.AttentionService")
    sp = ctr.get("startupProbe") or {}
    window = sp.get("failureThreshold", 3) * sp.get("periodSeconds", 10)
    c.check(window >= 120, f"startupProbe allows only {window} s for model loading (want >= 120)")
    c.check(get(ctr, "livenessProbe", "failureThreshold", default=3) >= 2,
            "livenessProbe failureThreshold >= 2")

    # Resources: requests and limits for cpu and memory; limits >= requests.
    res = ctr.get("resources", {})
    for kind in ("requests", "limits"):
        for r in ("cpu", "memory"):
            c.check(get(res, kind, r) is not None, f"resources.{kind}.{r} missing")
    if get(res, "requests", "cpu") and get(res, "limits", "cpu"):
        c.check(cpu_cores(res["limits"]["cpu"]) >= cpu_cores(res["requests"]["cpu"]),
                "cpu limit below request")

    # Security.
    psc, csc = spec.get("securityContext", {}), ctr.get("securityContext", {})
    c.check(csc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True, "runAsNonRoot: true")
    c.check(csc.get("runAsUser", psc.get("runAsUser")) == UID, f"runAsUser: {UID}")
    c.check(csc.get("readOnlyRootFilesystem") is True, "readOnlyRootFilesystem: true")
    c.check(csc.get("allowPrivilegeEscalation") is False, "allowPrivilegeEscalation: false")
    c.check("ALL" in get(csc, "capabilities", "drop", default=[]), "capabilities.drop: [ALL]")
    c.check(csc.get("privileged") in (None, False), "not privileged")
    c.check(spec.get("automountServiceAccountToken") is False,
            "automountServiceAccountToken: false (the server never calls the API)")

    # Volumes: /tmp emptyDir, the model PVC read-only at /models, the ConfigMap.
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    mounts = {m["mountPath"]: m for m in ctr.get("volumeMounts", [])}
    tmp = mounts.get("/tmp")
    c.check(tmp is not None and "emptyDir" in volumes.get(tmp["name"], {}),
            "/tmp must be an emptyDir (read-only root filesystem)")
    models = mounts.get("/models")
    if c.check(models is not None, "/models not mounted"):
        c.check(models.get("readOnly") is True, "/models must be mounted readOnly")
        claim = get(volumes.get(models["name"], {}), "persistentVolumeClaim", "claimName")
        c.check(claim == "mha-models", "/models must be the PersistentVolumeClaim mha-models")
        c.check(any(p["metadata"]["name"] == "mha-models"
                    for p in by_kind.get("PersistentVolumeClaim", [])),
                "PersistentVolumeClaim mha-models not rendered")
    env = {e["name"]: e for e in ctr.get("env", [])}
    c.check(get(env, "MHA_MODEL_REPOSITORY", "value") == "/models", "MHA_MODEL_REPOSITORY=/models")
    c.check(get(env, "MHA_GRPC_ADDRESS", "value", default="").endswith(f":{GRPC_PORT}"),
            f"MHA_GRPC_ADDRESS on port {GRPC_PORT}")
    c.check(get(env, "MHA_METRICS_ADDRESS", "value", default="").endswith(f":{METRICS_PORT}"),
            f"MHA_METRICS_ADDRESS on port {METRICS_PORT}")

    # TLS: the certificate and key are files of a mounted Secret.
    for var in ("MHA_TLS_CERT_FILE", "MHA_TLS_KEY_FILE", "MHA_TLS_CLIENT_CA_FILE"):
        path = get(env, var, "value")
        if path is None:
            c.check(not tls or var == "MHA_TLS_CLIENT_CA_FILE", f"TLS overlay: {var} not set")
            continue
        mount = next((m for p, m in mounts.items() if path.startswith(p.rstrip("/") + "/")), None)
        c.check(mount is not None and mount.get("readOnly") is True and
                "secret" in volumes.get(mount["name"], {}),
                f"{var}={path} is not on a read-only Secret volume")

    # --config FILE: a mounted ConfigMap key, rendered.
    args = ctr.get("args", []) + ctr.get("command", [])
    grace = None
    config_text = ""
    if c.check("--config" in args and args.index("--config") + 1 < len(args),
               "args must pass --config FILE"):
        path = args[args.index("--config") + 1]
        mount = next((m for p, m in mounts.items() if path.startswith(p.rstrip("/") + "/")), None)
        if c.check(mount is not None, f"--config {path} is not on a mounted volume"):
            cm_name = get(volumes.get(mount["name"], {}), "configMap", "name")
            key = os.path.relpath(path, mount["mountPath"])
            cm = next((m for m in by_kind.get("ConfigMap", [])
                       if m["metadata"]["name"] == cm_name), None)
            if c.check(cm is not None and key in cm.get("data", {}),
                       f"--config {path}: ConfigMap {cm_name} with key {key} not rendered"):
                config_text = cm["data"][key]
                m = re.search(r"^grace-period-s\s*=\s*([0-9.]+)", config_text, re.MULTILINE)
                grace = float(m.group(1)) if m else 10.0  # the server's default

    # Termination: longer than preStop + the server's own grace period.
    pre_stop = 0.0
    cmd = get(ctr, "lifecycle", "preStop", "exec", "command", default=[])
    if len(cmd) == 2 and cmd[0] == "sleep":
        pre_stop = float(cmd[1])
    tgp = spec.get("terminationGracePeriodSeconds", 30)
    if grace is not None:
        c.check(tgp > pre_stop + grace,
                f"terminationGracePeriodSeconds {tgp} must exceed preStop {pre_stop} s + "
                f"grace-period-s {grace}")

    # Prometheus annotations point at the metrics port.
    ann = get(pod, "metadata", "annotations", default={})
    c.check(ann.get("prometheus.io/scrape") == "true", "pod annotation prometheus.io/scrape")
    c.check(ann.get("prometheus.io/port") == str(METRICS_PORT), "pod annotation prometheus.io/port")
    c.check(ann.get("prometheus.io/path") == "/metrics", "pod annotation prometheus.io/path")

    # The shared KV store: its StatefulSet and Services, the server's --kv-store and password.
    check_k8s_kv_store.check(c, by_kind, config_text, mounts, volumes)

    # Services of the server: a ClusterIP one with grpc (appProtocol grpc) + metrics, a headless
    # one (the KV store's are checked above).
    services = [s for s in by_kind.get("Service", []) if selects(s["spec"].get("selector"), pod_labels)]
    main = [s for s in services if s["spec"].get("clusterIP") != "None"]
    headless = [s for s in services if s["spec"].get("clusterIP") == "None"]
    c.check(len(main) == 1 and len(headless) == 1, "one ClusterIP and one headless Service")
    for s in services:
        name = s["metadata"]["name"]
        c.check(selects(s["spec"].get("selector"), pod_labels),
                f"Service {name} selector does not match the pods")
        for p in s["spec"].get("ports", []):
            tp = p.get("targetPort")
            c.check(tp in ports or tp in (GRPC_PORT, METRICS_PORT),
                    f"Service {name} targetPort {tp} is not a container port")
        grpc = [p for p in s["spec"].get("ports", []) if p.get("name") == "grpc"]
        c.check(len(grpc) == 1 and grpc[0]["port"] == GRPC_PORT and
                grpc[0].get("appProtocol") == "grpc",
                f"Service {name}: port grpc {GRPC_PORT} with appProtocol grpc")
    if main:
        c.check(any(p.get("name") == "metrics" and p["port"] == METRICS_PORT
                    for p in main[0]["spec"]["ports"]), f"Service metrics port {METRICS_PORT}")
    for s in headless:
        c.check(not any(p.get("name") == "metrics" for p in s["spec"]["ports"]),
                "headless Service must not expose metrics (pods would be scraped twice)")

    # ServiceMonitor: selects exactly the main Service, scrapes its metrics port.
    for sm in by_kind.get("ServiceMonitor", []):
        c.check(sm["apiVersion"] == "monitoring.coreos.com/v1", "ServiceMonitor apiVersion")
        chosen = [s for s in services
                  if selects(get(sm, "spec", "selector", "matchLabels"), s["metadata"].get("labels", {}))]
        c.check(main and chosen == main,
                f"ServiceMonitor must select exactly the ClusterIP Service, selects "
                f"{[s['metadata']['name'] for s in chosen]}")
        eps = get(sm, "spec", "endpoints", default=[])
        c.check(any(e.get("port") == "metrics" for e in eps), "ServiceMonitor endpoint port metrics")
        job_label = get(sm, "spec", "jobLabel")
        if main and job_label:
            c.check(main[0]["metadata"].get("labels", {}).get(job_label) == "mha-serve",
                    "ServiceMonitor jobLabel must yield job=\"mha-serve\" (the alerts' job)")

    # PDB and HPA.
    for pdb in by_kind.get("PodDisruptionBudget", []):
        c.check(pdb["apiVersion"] == "policy/v1", "PodDisruptionBudget apiVersion policy/v1")
        c.check(selects(get(pdb, "spec", "selector", "matchLabels"), pod_labels),
                "PodDisruptionBudget selector does not match the pods")
    adapter_names = promql_names.adapter_exprs(
        os.path.join(repo, "deploy/k8s/prometheus-adapter-rules.yaml"))[1]
    for hpa in by_kind.get("HorizontalPodAutoscaler", []):
        c.check(hpa["apiVersion"] == "autoscaling/v2", "HPA apiVersion autoscaling/v2")
        ref = hpa["spec"]["scaleTargetRef"]
        c.check(ref.get("kind") == "Deployment" and ref.get("name") == dep["metadata"]["name"],
                "HPA scaleTargetRef is not the Deployment")
        c.check(hpa["spec"].get("minReplicas", 1) >= 2, "HPA minReplicas >= 2 (with the PDB)")
        pods_metrics = [m for m in hpa["spec"].get("metrics", []) if m["type"] == "Pods"]
        if c.check(pods_metrics, "HPA has no Pods custom metric"):
            for m in pods_metrics:
                name = m["pods"]["metric"]["name"]
                c.check(name in adapter_names,
                        f"HPA metric {name} is not served by deploy/k8s/prometheus-adapter-rules.yaml")

    # CPU vs GPU.
    limits, requests = res.get("limits", {}), res.get("requests", {})
    image = ctr.get("image", "")
    if gpu:
        c.check(str(limits.get("nvidia.com/gpu")) == "1", "GPU overlay: limits nvidia.com/gpu: 1")
        c.check(str(requests.get("nvidia.com/gpu", limits.get("nvidia.com/gpu"))) == "1",
                "GPU overlay: nvidia.com/gpu request equal to the limit")
        c.check(bool(spec.get("nodeSelector")) or bool(spec.get("affinity")),
                "GPU overlay: nodeSelector/affinity for GPU nodes")
        c.check(any(t.get("key") == "nvidia.com/gpu" for t in spec.get("tolerations", [])),
                "GPU overlay: toleration for nvidia.com/gpu")
        c.check(get(env, "MHA_DEVICE", "value", default="").startswith("cuda"),
                "GPU overlay: MHA_DEVICE=cuda")
        c.check("cuda" in image, f"GPU overlay: the CUDA image (got {image})")
    else:
        c.check("nvidia.com/gpu" not in limits and "nvidia.com/gpu" not in requests,
                "CPU overlay must not request GPUs")
        c.check(not get(env, "MHA_DEVICE", "value", default="").startswith("cuda"),
                "CPU overlay: MHA_DEVICE must not be cuda")
        c.check(image and "cuda" not in image, f"CPU overlay: the CPU image (got {image})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--kubectl", default=os.environ.get("MHA_KUBECTL", "kubectl"))
    args = ap.parse_args()
    failures, total = [], 0
    for overlay in ("cpu", "gpu", "cpu-tls"):
        docs = render(args.kubectl, os.path.join(args.repo, "deploy/k8s/overlays", overlay))
        c = Checker(overlay)
        check_overlay(c, docs, args.repo, gpu=overlay == "gpu", tls=overlay.endswith("-tls"))
        print(f"overlays/{overlay}: {len(docs)} objects "
              f"({', '.join(sorted(d['kind'] for d in docs))}), {c.count} checks")
        failures += c.failures
        total += c.count
    for f in failures:
        print("FAIL: " + f)
    if failures:
        return 1
    print(f"OK: {total} checks on the cpu, gpu and cpu-tls overlays")
    return 0


if __name__ == "__main__":
    sys.exit(main())
