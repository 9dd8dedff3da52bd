"""Strict validation of custom resources against the CRD schemas kept in tests/deploy/schemas/.

A CRD's openAPIV3Schema never says additionalProperties: false; the API server drops (prunes)
unknown fields silently, so a misspelt field would do nothing. Here every object schema with
`properties`, no `additionalProperties` and no `x-kubernetes-preserve-unknown-fields: true` gets
additionalProperties: false, so an unknown field is an error. Sub-schemas pruned by
schemas/extract_crd_schema.py ({"x-mha-pruned": true}) reject anything, with a message saying so.
Checked with Debian's python3-jsonschema (Draft 4: OpenAPI 3.0's dialect is closest to it).
Not evaluated: CEL rules (x-kubernetes-validations) and `format`; `count_cel` reports how many
rules sit on the kept schema.
"""
import copy
import glob
import json
import os
import sys

try:
    import jsonschema
except ImportError:
    sys.exit("FAIL: python3-jsonschema missing; run scripts/install-deps.sh test")

SCHEMA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schemas")
METADATA_KEYS = {"name", "namespace", "labels", "annotations", "generateName"}
REJECT = {"not": {}, "x-mha-pruned": True}
ROOT_FIELDS = {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
               "metadata": {"type": "object"}}


def strict(node):
    """A copy of `node` where every object with known properties refuses unknown ones."""
    if not isinstance(node, dict):
        return node
    if node.get("x-mha-pruned"):
        return dict(REJECT)
    out = dict(node)
    if "properties" in node:
        out["properties"] = {k: strict(v) for k, v in node["properties"].items()}
        if "additionalProperties" not in node and \
                not node.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = strict(node["additionalProperties"])
    if isinstance(node.get("items"), dict):
        out["items"] = strict(node["items"])
    # anyOf/allOf/oneOf/not branches only constrain fields declared beside them (structural
    # schemas): left as they are, since closing a branch would reject the parent's fields.
    return out


def count_cel(node):
    if isinstance(node, dict):
        n = len(node.get("x-kubernetes-validations", []))
        return n + sum(count_cel(v) for k, v in node.items() if k != "x-kubernetes-validations")
    if isinstance(node, list):
        return sum(count_cel(v) for v in node)
    return 0


class Schemas:
    """The kept CRD schemas, by (apiVersion, kind)."""

    def __init__(self, directory=SCHEMA_DIR):
        self.by_type = {}
        for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
            with open(path) as f:
                doc = json.load(f)
            if "openAPIV3Schema" not in doc:
                continue
            doc["file"] = os.path.basename(path)
            # The API server accepts these at the top of every object, listed or not (Istio's
            # CRDs list only spec and status).
            root = copy.deepcopy(doc["openAPIV3Schema"])
            root.setdefault("properties", {})
            for key, schema in ROOT_FIELDS.items():
                root["properties"].setdefault(key, schema)
            doc["strict"] = strict(root)
            self.by_type[(doc["apiVersion"], doc["kind"])] = doc

    def get(self, api_version, kind):
        return self.by_type.get((api_version, kind))

    def validate(self, doc):
        """Error strings (empty: valid) for one manifest object."""
        entry = self.get(doc.get("apiVersion"), doc.get("kind"))
        if entry is None:
            return [f"no schema for {doc.get('apiVersion')} {doc.get('kind')} in {SCHEMA_DIR}"]
        errors = validate(entry["strict"], doc)
        errors += check_metadata(doc.get("metadata"), entry["scope"])
        return errors


def where(error):
    return "/".join(str(p) for p in error.absolute_path) or "(top)"


def validate(schema, doc):
    errors = []
    validator = jsonschema.Draft4Validator(schema)
    for e in sorted(validator.iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path]):
        if e.validator == "not" and isinstance(e.schema, dict) and e.schema.get("x-mha-pruned"):
            errors.append(f"{where(e)}: the CRD has this field but its schema was pruned from "
                          "tests/deploy/schemas; re-extract it (schemas/README.md)")
        elif e.validator == "additionalProperties" and e.validator_value is False:
            errors.append(f"{where(e)}: unknown field: {e.message}")
        else:
            errors.append(f"{where(e)}: {e.message}")
    return errors


def check_metadata(meta, scope):
    """ObjectMeta is not in a CRD's schema: the few fields manifests set, strictly."""
    if not isinstance(meta, dict):
        return ["metadata: missing"]
    errors = [f"metadata: unknown or unexpected field {k!r}" for k in sorted(set(meta) - METADATA_KEYS)]
    if not meta.get("name"):
        errors.append("metadata.name: missing")
    if scope == "Cluster" and "namespace" in meta:
        errors.append("metadata.namespace: set on a cluster-scoped object")
    for key in ("labels", "annotations"):
        for k, v in (meta.get(key) or {}).items():
            if not isinstance(v, str):
                errors.append(f"metadata.{key}.{k}: {v!r} is not a string (quote it)")
    return errors


def with_field(doc, path, key, value):
    """A deep copy of `doc` with doc[path...][key] = value (for negative self-checks)."""
    out = copy.deepcopy(doc)
    node = out
    for p in path:
        node = node[p]
    node[key] = value
    return out


def first_pruned(schema, path=()):
    """Path of the first property whose schema was pruned (breadth-first), or None."""
    queue = [(schema, tuple(path))]
    while queue:
        node, at = queue.pop(0)
        for name, sub in (node.get("properties") or {}).items():
            if sub.get("x-mha-pruned"):
                return at + (name,)
            if sub.get("type") == "object":
                queue.append((sub, at + (name,)))
    return None


def self_test():
    """The strict schema must refuse what the plain one lets through, and pruned parts refuse all."""
    plain = {"type": "object", "properties": {
        "a": {"type": "object", "properties": {"b": {"type": "integer"}}},
        "open": {"type": "object", "properties": {"x": {"type": "string"}},
                 "x-kubernetes-preserve-unknown-fields": True},
        "map": {"type": "object", "additionalProperties": {"type": "string"}},
        "big": {"x-mha-pruned": True}}}
    s = strict(plain)
    assert not validate(s, {"a": {"b": 1}, "open": {"y": 1}, "map": {"k": "v"}})
    assert validate(s, {"a": {"b": 1, "c": 2}}), "unknown nested field accepted"
    assert validate(s, {"z": 1}), "unknown top-level field accepted"
    assert validate(s, {"a": {"b": "one"}}), "wrong type accepted"
    assert validate(s, {"map": {"k": 1}}), "wrong map value type accepted"
    assert any("pruned" in e for e in validate(s, {"big": {}})), "pruned field accepted"
    assert not validate(plain, {"a": {"c": 2}}), "jsonschema itself changed"
    assert check_metadata({"name": "x", "namespace": "n"}, "Cluster")
    assert check_metadata({"name": "x", "annotations": {"p": 8502}}, "Namespaced")
    assert check_metadata({"name": "x", "lables": {}}, "Namespaced")
    assert not check_metadata({"name": "x", "labels": {"a": "b"}}, "Namespaced")
