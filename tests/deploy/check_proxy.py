#!/usr/bin/python3
"""deploy/proxy/: session affinity on the `x-session-id` gRPC metadata, checked without a cluster.

  nginx/nginx.conf        `nginx -t` with Debian's nginx (loopback placeholders as shipped), and
                          the directives the affinity depends on (hash $http_x_session_id
                          consistent, grpc_pass to that upstream, an http2 listener).
                          check_nginx_affinity.py runs it against gRPC backends.
  envoy/envoy.yaml        no Envoy here: YAML, the route's hash_policy on x-session-id, the
                          cluster's RING_HASH/MAGLEV, HTTP/2 upstream, known @type names.
  istio/, gateway-api/    strictly against Istio's, the Gateway API's and Envoy Gateway's CRD
                          schemas (tests/deploy/schemas/, crd_schema.py), plus the CEL rules
                          the affinity relies on and references between the objects.
Negative self-checks: broken copies of each must be refused.

  check_proxy.py --repo . [--nginx nginx]
"""
import argparse
import copy
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import crd_schema  # noqa: E402

HEADER = "x-session-id"
GRPC_PORT = 8500
ENVOY_TYPES = {  # the typed_config / protocol options envoy.yaml may use (Envoy API v3)
    "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
    "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router",
    "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
}


# ---- nginx ----------------------------------------------------------------------------------

def strip_comments(text):
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())


def nginx_static(text):
    """Errors in what the affinity depends on (nginx -t cannot know the intent)."""
    t = strip_comments(text)
    errors = []
    ups = re.findall(r"upstream\s+([\w.-]+)\s*\{([^}]*)\}", t)
    hashed = [name for name, body in ups
              if re.search(r"^\s*hash\s+\$http_x_session_id\s+consistent\s*;", body, re.M)]
    if not hashed:
        errors.append("no upstream with `hash $http_x_session_id consistent;`")
    for name, body in ups:
        for addr in re.findall(r"^\s*server\s+(\S+)", body, re.M):
            if not addr.startswith("127.0.0.1:"):
                errors.append(f"upstream {name}: server {addr} is not a 127.0.0.1 placeholder")
    passes = re.findall(r"grpc_pass\s+grpc://([\w.-]+)\s*;", t)
    if not passes or any(p not in hashed for p in passes):
        errors.append(f"grpc_pass must name the hashed upstream {hashed}, names {passes}")
    if re.search(r"\b(proxy_pass|grpc_pass\s+grpcs?://\d)", t):
        errors.append("a location bypasses the hashed upstream")
    if not re.search(r"^\s*listen\s+[^;]*\bhttp2\b[^;]*;|^\s*http2\s+on\s*;", t, re.M):
        errors.append("no HTTP/2 listener (gRPC needs `listen ... http2`)")
    return errors


def nginx_test(nginx, text, tmp):
    """(ok, output) of `nginx -t` on `text` with prefix `tmp`."""
    conf = os.path.join(tmp, "nginx.conf")
    with open(conf, "w") as f:
        f.write(text)
    r = subprocess.run([nginx, "-t", "-p", tmp + "/", "-e", "stderr", "-c", conf],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    return r.returncode == 0, r.stdout.strip()


def check_nginx(repo, nginx, fail):
    exe = shutil.which(nginx) or (nginx if os.path.isfile(nginx) else None)
    if not exe:
        fail(f"{nginx} not found; `scripts/install-deps.sh test` installs Debian's nginx")
        return
    text = open(os.path.join(repo, "deploy/proxy/nginx/nginx.conf")).read()
    for e in nginx_static(text):
        fail("nginx.conf: " + e)
    with tempfile.TemporaryDirectory() as tmp:
        ok, out = nginx_test(exe, text, tmp)
        if not ok:
            fail(f"nginx -t deploy/proxy/nginx/nginx.conf:\n{out}")
        print(f"nginx -t: {'ok' if ok else 'FAILED'}")
        broken = {
            "an unknown directive": text.replace("grpc_next_upstream error",
                                                 "grpc_next_upstreams error"),
            "grpc_pass to an undefined upstream": re.sub(r"grpc_pass grpc://\w+",
                                                         "grpc_pass grpc://no_such_upstream", text),
            "a missing ;": text.replace("consistent;", "consistent"),
        }
        for what, bad in broken.items():
            if bad == text:
                fail(f"self-check: could not make a copy with {what}")
            elif nginx_test(exe, bad, tmp)[0]:
                fail(f"self-check: nginx -t accepted a copy with {what}")
    no_hash = re.sub(r"^\s*hash\s+\$http_x_session_id\s+consistent;\n", "", text, flags=re.M)
    for what, bad in {"no hash": no_hash,
                      "hash without consistent": text.replace(" consistent;", ";"),
                      "no http2": re.sub(r"\s+http2;", ";", text)}.items():
        if bad == text or not nginx_static(bad):
            fail(f"self-check: the static nginx check accepted a copy with {what}")


# ---- Envoy ----------------------------------------------------------------------------------

def walk(node):
    yield node
    if isinstance(node, dict):
        for v in node.values():
            yield from walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from walk(v)


def envoy_errors(doc, health_names):
    errors = []
    res = (doc or {}).get("static_resources", {})
    clusters = {c.get("name"): c for c in res.get("clusters", [])}
    routes = [n for n in walk(res.get("listeners", [])) if isinstance(n, dict) and "route" in n
              and isinstance(n["route"], dict) and "cluster" in n["route"]]
    if not routes:
        errors.append("no route to a cluster")
    for r in routes:
        route = r["route"]
        headers = [h.get("header", {}).get("header_name") for h in route.get("hash_policy", [])]
        if HEADER not in headers:
            errors.append(f"route to {route['cluster']}: no hash_policy header {HEADER}")
        c = clusters.get(route["cluster"])
        if c is None:
            errors.append(f"route to undefined cluster {route['cluster']}")
            continue
        if c.get("lb_policy") not in ("RING_HASH", "MAGLEV"):
            errors.append(f"cluster {c['name']}: lb_policy {c.get('lb_policy')} does not use the "
                          "hash (RING_HASH or MAGLEV)")
        opts = c.get("typed_extension_protocol_options", {}).get(
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions", {})
        if "http2_protocol_options" not in opts.get("explicit_http_config", {}):
            errors.append(f"cluster {c['name']}: upstream must be HTTP/2 (gRPC)")
        for hc in c.get("health_checks", []):
            name = hc.get("grpc_health_check", {}).get("service_name", "")
            if name not in health_names:
                errors.append(f"cluster {c['name']}: gRPC health service {name!r} is not one "
                              f"the server sets {sorted(health_names)}")
        ports = {n["port_value"] for n in walk(c.get("load_assignment", {}))
                 if isinstance(n, dict) and "port_value" in n}
        if ports != {GRPC_PORT}:
            errors.append(f"cluster {c['name']}: endpoints on ports {ports}, want {GRPC_PORT}")
    hcm = [n for n in walk(res) if isinstance(n, dict) and n.get("codec_type")]
    if not hcm or any(n["codec_type"] not in ("HTTP2", "AUTO") for n in hcm):
        errors.append("http_connection_manager codec_type must be HTTP2 (or AUTO)")
    for n in walk(doc):
        if isinstance(n, dict) and "@type" in n and n["@type"] not in ENVOY_TYPES:
            errors.append(f"unexpected @type {n['@type']}")
    return errors


def check_envoy(repo, health_names, fail):
    with open(os.path.join(repo, "deploy/proxy/envoy/envoy.yaml")) as f:
        doc = yaml.safe_load(f)
    for e in envoy_errors(doc, health_names):
        fail("envoy.yaml: " + e)
    bad = copy.deepcopy(doc)
    for n in walk(bad):
        if isinstance(n, dict) and n.get("lb_policy"):
            n["lb_policy"] = "ROUND_ROBIN"
    bad2 = copy.deepcopy(doc)
    for n in walk(bad2):
        if isinstance(n, dict) and "header_name" in n:
            n["header_name"] = "x-session"
    for what, b in (("lb_policy ROUND_ROBIN", bad), ("hash on another header", bad2)):
        if not envoy_errors(b, health_names):
            fail(f"self-check: envoy.yaml with {what} was accepted")


# ---- Istio, Gateway API, Envoy Gateway ------------------------------------------------------

def affinity_errors(docs, service):
    """The objects' own intent: the hash header, CEL rules of the affinity, references."""
    errors = []
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d.get("kind"), []).append(d)
    svc_host = f"{service['metadata']['name']}.mha-serve.svc.cluster.local"
    for dr in by_kind.get("DestinationRule", []):
        ch = dr["spec"].get("trafficPolicy", {}).get("loadBalancer", {}).get("consistentHash", {})
        if ch.get("httpHeaderName") != HEADER:
            errors.append(f"DestinationRule {dr['metadata']['name']}: consistentHash."
                          f"httpHeaderName must be {HEADER}")
        if dr["spec"].get("host") not in (svc_host, svc_host.replace("mha-serve.mha", "mha-serve-predictor.mha")):
            errors.append(f"DestinationRule: host {dr['spec'].get('host')} is not the mha-serve Service")
    gateways = {g["metadata"]["name"]: g for g in by_kind.get("Gateway", [])}
    routes = {r["metadata"]["name"]: r for r in by_kind.get("GRPCRoute", [])}
    for r in routes.values():
        for p in r["spec"].get("parentRefs", []):
            g = gateways.get(p["name"])
            if g is None or (p.get("sectionName") and p["sectionName"] not in
                             [listener["name"] for listener in g["spec"]["listeners"]]):
                errors.append(f"GRPCRoute {r['metadata']['name']}: parentRef {p} is not a Gateway listener here")
        ports = {p["port"] for p in service["spec"]["ports"] if p.get("name") == "grpc"}
        for rule in r["spec"].get("rules", []):
            for b in rule.get("backendRefs", []):
                if b.get("name") != service["metadata"]["name"] or b.get("port") not in ports:
                    errors.append(f"GRPCRoute: backendRef {b} is not Service mha-serve port grpc")
    for p in by_kind.get("BackendTrafficPolicy", []):
        lb = p["spec"].get("loadBalancer", {})
        ch = lb.get("consistentHash", {})
        # Envoy Gateway's CEL rules (not evaluated by jsonschema), for the fields used here.
        if (lb.get("type") == "ConsistentHash") != ("consistentHash" in lb) or \
                lb.get("type") != "ConsistentHash":
            errors.append("BackendTrafficPolicy: loadBalancer.type ConsistentHash with consistentHash")
        for t, field in (("Header", "header"), ("Headers", "headers")):
            if (ch.get("type") == t) != (field in ch):
                errors.append(f"BackendTrafficPolicy: consistentHash.type {t} iff {field} is set")
        names = [h.get("name") for h in ch.get("headers", [])] + [ch.get("header", {}).get("name")]
        if HEADER not in names:
            errors.append(f"BackendTrafficPolicy: consistentHash must hash the {HEADER} header")
        for ref in p["spec"].get("targetRefs", []):
            if ref.get("kind") != "GRPCRoute" or ref.get("name") not in routes:
                errors.append(f"BackendTrafficPolicy: targetRef {ref} is not a GRPCRoute here")
    return errors


def check_crs(repo, fail):
    schemas = crd_schema.Schemas()
    docs, count = [], 0
    for sub in ("istio", "gateway-api"):
        directory = os.path.join(repo, "deploy/proxy", sub)
        for fn in sorted(os.listdir(directory)):
            if not fn.endswith((".yaml", ".yml")):
                continue
            with open(os.path.join(directory, fn)) as f:
                for d in (d for d in yaml.safe_load_all(f) if d):
                    count += 1
                    docs.append(d)
                    for e in schemas.validate(d):
                        fail(f"{sub}/{fn}: {d.get('kind')} {d.get('metadata', {}).get('name')}: {e}")
                    entry = schemas.get(d.get("apiVersion"), d.get("kind")) or {}
                    src = entry.get("source", {})
                    print(f"{sub}/{fn}: {d.get('kind')}: strict schema {entry.get('file')} "
                          f"({src.get('repository')}@{str(src.get('commit'))[:12]}); "
                          f"{crd_schema.count_cel(entry.get('openAPIV3Schema', {}))} CEL rules "
                          "not evaluated")
                    broken = crd_schema.with_field(d, ["spec"], "mhaNoSuchField", 1)
                    if not schemas.validate(broken):
                        fail(f"self-check: {d.get('kind')} with an unknown spec field was accepted")
    kinds = {d.get("kind") for d in docs}
    for kind in ("DestinationRule", "Gateway", "GRPCRoute", "BackendTrafficPolicy"):
        if kind not in kinds:
            fail(f"no {kind} under deploy/proxy")
    with open(os.path.join(repo, "deploy/k8s/base/service.yaml")) as f:
        service = yaml.safe_load(f)
    for e in affinity_errors(docs, service):
        fail(e)
    deep = [
        ("DestinationRule", ["spec", "trafficPolicy", "loadBalancer", "consistentHash"], "httpHeader", HEADER),
        ("GRPCRoute", ["spec", "rules", 0, "backendRefs", 0], "weigth", 1),
        ("BackendTrafficPolicy", ["spec", "loadBalancer", "consistentHash"], "tablesize", 1),
    ]
    for kind, path, key, value in deep:
        d = next(x for x in docs if x.get("kind") == kind)
        if not schemas.validate(crd_schema.with_field(d, path, key, value)):
            fail(f"self-check: {kind} with {'/'.join(map(str, path))}/{key} was accepted")
    for kind, path, key, value in (
            ("DestinationRule", ["spec", "trafficPolicy", "loadBalancer", "consistentHash"],
             "httpHeaderName", "x-user"),
            ("BackendTrafficPolicy", ["spec", "loadBalancer"], "type", "RoundRobin")):
        mutated = [crd_schema.with_field(x, path, key, value) if x.get("kind") == kind else x
                   for x in docs]
        if not affinity_errors(mutated, service):
            fail(f"self-check: {kind} with {key}={value} passed the affinity checks")
    return count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--nginx", default=os.environ.get("MHA_NGINX", "nginx"))
    args = ap.parse_args()
    crd_schema.self_test()
    failures = []
    fail = failures.append
    app = open(os.path.join(args.repo, "server/app/server_app.cc")).read()
    health_names = {""} | set(re.findall(r'"((?:mha|inference)\.[A-Za-z0-9_.]+)"', app))
    check_nginx(args.repo, args.nginx, fail)
    check_envoy(args.repo, health_names, fail)
    count = check_crs(args.repo, fail)
    print(f"nginx.conf, envoy.yaml and {count} Istio / Gateway API objects checked")
    for f in failures:
        print("FAIL: " + f)
    if failures:
        return 1
    print(f"OK: deploy/proxy pins sessions on {HEADER} (nginx -t, envoy structure, strict CRD schemas)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
