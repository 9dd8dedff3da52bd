#!/usr/bin/python3
"""Checks proto/inference/*.proto against the Open Inference Protocol specification files.

Every message, field (name, number, type, label, oneof), enum value and RPC that our trimmed files
keep must be identical in Triton's grpc_service.proto / model_config.proto; what we leave out is
listed, not an error.

Usage (protoc and Debian's python3-protobuf):
  protoc -Iproto --include_imports --descriptor_set_out=/tmp/ours.pb inference/grpc_service.proto
  protoc -I<triton common>/protobuf --include_imports --descriptor_set_out=/tmp/spec.pb \
      grpc_service.proto
  /usr/bin/python3 tools/check_oip_proto.py /tmp/ours.pb /tmp/spec.pb
Exit status 1 on any mismatch.
"""
import sys

from google.protobuf import descriptor_pb2


def load(path):
    files = descriptor_pb2.FileDescriptorSet()
    with open(path, "rb") as f:
        files.ParseFromString(f.read())
    return files


def index(files):
    messages, enums, rpcs = {}, {}, {}

    def walk(prefix, message):
        name = prefix + message.name
        messages[name] = {
            f.name: (f.number, f.type, f.label, f.type_name.split(".")[-1],
                     message.oneof_decl[f.oneof_index].name
                     if f.HasField("oneof_index") else "")
            for f in message.field
        }
        for e in message.enum_type:
            enums[name + "." + e.name] = {v.name: v.number for v in e.value}
        for nested in message.nested_type:
            walk(name + ".", nested)

    for f in files.file:
        for m in f.message_type:
            walk("", m)
        for e in f.enum_type:
            enums[e.name] = {v.name: v.number for v in e.value}
        for service in f.service:
            for r in service.method:
                rpcs[service.name + "." + r.name] = (
                    r.input_type.split(".")[-1], r.output_type.split(".")[-1],
                    r.client_streaming, r.server_streaming)
    return messages, enums, rpcs


def main(ours_path, spec_path):
    ours_m, ours_e, ours_r = index(load(ours_path))
    spec_m, spec_e, spec_r = index(load(spec_path))
    bad = 0
    fields = 0
    for name, ours in ours_m.items():
        if name not in spec_m:
            print("message not in the specification:", name)
            bad += 1
            continue
        for field, facts in ours.items():
            fields += 1
            if spec_m[name].get(field) != facts:
                print("field differs:", name, field, facts, "spec:", spec_m[name].get(field))
                bad += 1
    for name, values in ours_e.items():
        if spec_e.get(name) != values:
            print("enum differs:", name, values, "spec:", spec_e.get(name))
            bad += 1
    for name, facts in ours_r.items():
        if spec_r.get(name) != facts:
            print("rpc differs:", name, facts, "spec:", spec_r.get(name))
            bad += 1
    print(f"{len(ours_m)} messages, {fields} fields, {len(ours_e)} enums, {len(ours_r)} rpcs "
          f"checked: {bad} mismatches")
    print("specification RPCs not served (UNIMPLEMENTED):", ", ".join(sorted(set(spec_r) - set(ours_r))))
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
