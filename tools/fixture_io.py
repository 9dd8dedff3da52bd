#!/usr/bin/python3
"""Fixture files: the hand-written safetensors writer/reader and file helpers (part of tools/gen_fixtures.py; run that)."""

import json
import os
import struct

import torch

# ----------------------------------------------------------------------------
# safetensors writer / reader (hand-written, no library)
# ----------------------------------------------------------------------------

# dtype -> (safetensors name, integer view dtype used to get exact bits, struct code)
_ST_DTYPES = {
    torch.float32: ("F32", torch.int32, "i"),
    torch.float16: ("F16", torch.int16, "h"),
    torch.bfloat16: ("BF16", torch.int16, "h"),
    torch.bool: ("BOOL", torch.uint8, "B"),
    torch.int64: ("I64", torch.int64, "q"),
}
_ST_BY_NAME = {v[0]: (k, v[1], v[2]) for k, v in _ST_DTYPES.items()}


def tensor_bytes(t):
    """Raw little-endian row-major bytes of a tensor (exact bit patterns)."""
    name, int_dtype, code = _ST_DTYPES[t.dtype]
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bool:
        ints = t.to(torch.uint8).flatten().tolist()
    else:
        ints = t.view(int_dtype).flatten().tolist()
    return struct.pack("<%d%s" % (len(ints), code), *ints)


def safetensors_bytes(tensors, metadata=None, drop_tail_bytes=0):
    """Serialise {name: tensor} to safetensors bytes.

    Tensors are laid out in sorted-name order. The header is padded with
    spaces so that 8 + N is a multiple of 8. drop_tail_bytes truncates the data
    section (used only to build a deliberately broken file).
    """
    header = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name]
        raw = tensor_bytes(t)
        header[name] = {
            "dtype": _ST_DTYPES[t.dtype][0],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = dict(metadata) if metadata else {"format": "pt"}
    hjson = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    pad = (8 - (8 + len(hjson)) % 8) % 8
    hjson += b" " * pad
    data = b"".join(blobs)
    if drop_tail_bytes:
        data = data[: len(data) - drop_tail_bytes]
    return struct.pack("<Q", len(hjson)) + hjson + data


def write_safetensors(path, tensors, metadata=None):
    raw = safetensors_bytes(tensors, metadata)
    write_bytes(path, raw)
    # round-trip self-check of the writer
    back, _ = read_safetensors(path)
    assert sorted(back) == sorted(tensors), (path, sorted(back), sorted(tensors))
    for k, t in tensors.items():
        b = back[k]
        assert b.dtype == t.dtype and b.shape == t.shape, (path, k)
        assert torch.equal(b, t.detach().cpu()), (path, k)


def read_safetensors(path):
    """Minimal strict safetensors reader -> ({name: tensor}, metadata)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError("file too short")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError("header length past end of file")
    header = json.loads(raw[8 : 8 + n].decode("utf-8"))
    data = raw[8 + n :]
    meta = header.pop("__metadata__", None)
    out = {}
    spans = []
    for name, info in header.items():
        dtype, int_dtype, code = _ST_BY_NAME[info["dtype"]]
        shape = info["shape"]
        b, e = info["data_offsets"]
        if not (0 <= b <= e <= len(data)):
            raise ValueError("data_offsets out of range for %s" % name)
        numel = 1
        for d in shape:
            numel *= d
        itemsize = struct.calcsize("<" + code)
        if e - b != numel * itemsize:
            raise ValueError("byte size mismatch for %s" % name)
        ints = list(struct.unpack("<%d%s" % (numel, code), data[b:e]))
        if dtype == torch.bool:
            t = torch.tensor(ints, dtype=torch.uint8).to(torch.bool)
        else:
            t = torch.tensor(ints, dtype=int_dtype).view(dtype)
        out[name] = t.reshape(shape)
        spans.append((b, e))
    spans.sort()
    pos = 0
    for b, e in spans:
        if b != pos:
            raise ValueError("data section has holes/overlaps")
        pos = e
    if pos != len(data):
        raise ValueError("trailing bytes in data section")
    return out, meta


# ----------------------------------------------------------------------------
# file helpers
# ----------------------------------------------------------------------------


def write_bytes(path, raw):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(raw)


def write_json(path, obj):
    write_bytes(path, (json.dumps(obj, sort_keys=True, indent=2) + "\n").encode("utf-8"))


def write_text(path, text):
    write_bytes(path, text.encode("utf-8"))


def rmtree(path):
    if not os.path.isdir(path):
        return
    for root, dirs, files in os.walk(path, topdown=False):
        for fn in files:
            os.remove(os.path.join(root, fn))
        for d in dirs:
            p = os.path.join(root, d)
            if os.path.islink(p):
                os.remove(p)
            else:
                os.rmdir(p)
    os.rmdir(path)


def stable_seed(name):
    """Deterministic (not hash()-randomised) seed from a case name."""
    h = 0
    for ch in name.encode("utf-8"):
        h = (h * 131 + ch) % 2147483629
    return h
