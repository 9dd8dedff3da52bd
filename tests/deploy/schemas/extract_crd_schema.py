#!/usr/bin/python3
"""Writes the part of a CustomResourceDefinition's openAPIV3Schema that tests/deploy needs.

Maintainer tool (not run by ctest; it needs the upstream repository). What it keeps, for one
served version of the CRD:
  - every schema node on the path of a field that the given manifests use, with its whole
    sub-schema where the manifests stop (scalars, small objects: everything);
  - every unused property whose schema is at most --keep-under bytes (compact JSON), whole;
  - an unused property with a larger schema (a PodSpec's volumes, an InferenceService's
    transformer, status, ...) becomes {"x-mha-pruned": true}: tests/deploy/crd_schema.py turns
    that into "always invalid", so a manifest that starts using such a field fails with a message
    saying to re-run this tool, instead of passing unchecked.
`description` texts are dropped; everything else (types, enums, required, x-kubernetes-*) is
kept as upstream wrote it. Output: JSON with the source (repository, path, commit) on top.

  git -C KSERVE show COMMIT:config/crd/full/serving.kserve.io_inferenceservices.yaml > /tmp/isvc.yaml
  extract_crd_schema.py crd --crd /tmp/isvc.yaml --version v1beta1 --repo kserve/kserve \
      --path config/crd/full/serving.kserve.io_inferenceservices.yaml --commit COMMIT \
      --manifests deploy/kserve/*.yaml --out tests/deploy/schemas/kserve-inferenceservice.json

  extract_crd_schema.py keda-trigger --scaler /tmp/prometheus_scaler.go --repo kedacore/keda \
      --path pkg/scalers/prometheus_scaler.go --commit COMMIT --out .../keda-prometheus-trigger.json
"""
import argparse
import json
import re
import sys

import yaml

PRUNED = {"x-mha-pruned": True}


def size(node):
    return len(json.dumps(node, separators=(",", ":")))


def strip(node):
    if isinstance(node, dict):
        return {k: strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node


def prune(schema, instances, keep_under):
    """`schema` (descriptions stripped) reduced to what `instances` (values at this place) use."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in ("anyOf", "allOf", "oneOf"):
        if key in schema:
            out[key] = [prune(s, instances, keep_under) for s in schema[key]]
    if "properties" in schema:
        props = {}
        for name, sub in schema["properties"].items():
            used = [i[name] for i in instances if isinstance(i, dict) and name in i]
            if used:
                props[name] = prune(sub, used, keep_under)
            elif size(sub) <= keep_under:
                props[name] = sub
            else:
                props[name] = dict(PRUNED)
        out["properties"] = props
    if isinstance(schema.get("additionalProperties"), dict):
        values = [v for i in instances if isinstance(i, dict) for v in i.values()]
        out["additionalProperties"] = prune(schema["additionalProperties"], values, keep_under)
    if isinstance(schema.get("items"), dict):
        elems = [e for i in instances if isinstance(i, list) for e in i]
        out["items"] = prune(schema["items"], elems, keep_under)
    return out


def crd(args):
    with open(args.crd) as f:
        crds = [d for d in yaml.safe_load_all(f)
                if isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition" and
                (not args.kind or d["spec"]["names"]["kind"] == args.kind)]
    if len(crds) != 1:
        sys.exit(f"{args.crd}: {len(crds)} CustomResourceDefinitions (of kind {args.kind}); "
                 "want one (--kind picks it from a multi-document file)")
    doc = crds[0]
    group, kind = doc["spec"]["group"], doc["spec"]["names"]["kind"]
    version = next((v for v in doc["spec"]["versions"] if v["name"] == args.version), None)
    if version is None:
        sys.exit(f"{args.crd}: no version {args.version}")
    api_version = f"{group}/{args.version}"
    instances = []
    for path in args.manifests:
        with open(path) as f:
            for d in yaml.safe_load_all(f):
                if isinstance(d, dict) and d.get("kind") == kind and d.get("apiVersion") == api_version:
                    instances.append(d)
    if not instances:
        sys.exit(f"no {kind} {api_version} in {args.manifests}")
    schema = prune(strip(version["schema"]["openAPIV3Schema"]), instances, args.keep_under)
    out = {
        "source": {"repository": args.repo, "path": args.path, "commit": args.commit},
        "apiVersion": api_version, "kind": kind, "scope": doc["spec"].get("scope", "Namespaced"),
        "keep_under_bytes": args.keep_under,
        "openAPIV3Schema": schema,
    }
    write(args.out, out)
    print(f"{args.out}: {kind} {api_version}, {size(schema)} bytes (upstream "
          f"{size(version['schema']['openAPIV3Schema'])})")


def keda_trigger(args):
    """The Prometheus scaler's trigger metadata keys, from its `keda:"name=..., order=..."` tags:
    KEDA's CRD types trigger metadata as map[string]string, so the CRD cannot catch a typo."""
    text = open(args.scaler).read()
    required, optional = [], []
    for tag in re.findall(r'`keda:"([^"]*)"`', text):
        fields = dict(p.strip().split("=", 1) if "=" in p else (p.strip(), "")
                      for p in tag.split(","))
        if "name" not in fields or "triggerMetadata" not in fields.get("order", ""):
            continue
        (optional if "optional" in fields or "default" in fields else required).append(fields["name"])
    if "serverAddress" not in required or "query" not in required:
        sys.exit(f"{args.scaler}: could not read the Prometheus scaler's metadata tags")
    out = {
        "source": {"repository": args.repo, "path": args.path, "commit": args.commit},
        "schema": {
            "type": "object",
            "properties": {n: {"type": "string"} for n in sorted(required + optional)},
            "required": sorted(required),
            "additionalProperties": False,
        },
    }
    write(args.out, out)
    print(f"{args.out}: required {sorted(required)}, optional {sorted(optional)}")


def write(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("crd", "keda-trigger"):
        p = sub.add_parser(name)
        p.add_argument("--repo", required=True)
        p.add_argument("--path", required=True)
        p.add_argument("--commit", required=True)
        p.add_argument("--out", required=True)
        if name == "crd":
            p.add_argument("--crd", required=True)
            p.add_argument("--version", required=True)
            p.add_argument("--kind", help="the resource kind, for a file of several CRDs")
            p.add_argument("--manifests", nargs="+", required=True)
            p.add_argument("--keep-under", type=int, default=1500)
        else:
            p.add_argument("--scaler", required=True)
    args = ap.parse_args()
    crd(args) if args.cmd == "crd" else keda_trigger(args)


if __name__ == "__main__":
    main()
