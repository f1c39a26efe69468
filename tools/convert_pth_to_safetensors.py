#!/usr/bin/python3
"""Converts a PyTorch checkpoint (.pth / .pt) to safetensors for `strata train --weights`.

    /usr/bin/python3 tools/convert_pth_to_safetensors.py in.pth out.safetensors

Reads the file with torch.load (on the CPU). The state dict may be the file
itself, nested under "state_dict", "model" or "module" (what training scripts
save), or a whole pickled nn.Module. A "module." prefix on every name (a model
saved from DataParallel) is removed. Names are kept otherwise: strata maps
torchvision and timm names itself (--weights-format, detected by default).

Written by hand, so the safetensors package is not needed: an 8-byte
little-endian header length, the JSON header (padded with spaces to a multiple
of 8 bytes), then the tensor data in C order. strata reads F32, F16, BF16, I32
and U8: float64 tensors are stored as F32, integer tensors (BatchNorm's
num_batches_tracked) as I32, and anything else is skipped with a note.
"""

import json
import os
import struct
import sys

import torch

NESTED_KEYS = ("state_dict", "model", "module")


def state_dict_of(obj):
    if isinstance(obj, torch.nn.Module):
        return obj.state_dict()
    if isinstance(obj, dict):
        for key in NESTED_KEYS:
            inner = obj.get(key)
            if isinstance(inner, torch.nn.Module):
                return inner.state_dict()
            if isinstance(inner, dict) and any(torch.is_tensor(v) for v in inner.values()):
                return inner
        if any(torch.is_tensor(v) for v in obj.values()):
            return obj
    raise SystemExit("error: no state dict found in the file (expected a dict of tensors, possibly under "
                     + ", ".join('"%s"' % k for k in NESTED_KEYS) + ")")


def to_storable(name, t):
    """(dtype name, tensor) as strata reads it, or None to skip."""
    if t.dtype == torch.float32:
        return "F32", t
    if t.dtype == torch.float16:
        return "F16", t
    if t.dtype == torch.bfloat16:
        return "BF16", t
    if t.dtype == torch.float64:
        return "F32", t.to(torch.float32)
    if t.dtype == torch.uint8:
        return "U8", t
    if t.dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.bool):
        return "I32", t.clamp(-2**31, 2**31 - 1).to(torch.int32) if t.dtype != torch.bool else t.to(torch.int32)
    print("note: skipping %s (dtype %s is not stored)" % (name, t.dtype), file=sys.stderr)
    return None


def tensor_bytes(t):
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: write the raw bits
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def main(argv):
    if len(argv) != 3 or argv[1] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        print("usage: convert_pth_to_safetensors.py in.pth out.safetensors", file=sys.stderr)
        return 2
    src, dst = argv[1], argv[2]
    try:
        obj = torch.load(src, map_location="cpu")
    except Exception as e:  # noqa: BLE001 - any load failure is reported the same way
        print("error: cannot read %s with torch.load: %s" % (src, e), file=sys.stderr)
        return 1
    sd = {k: v for k, v in state_dict_of(obj).items() if torch.is_tensor(v)}
    if sd and all(k.startswith("module.") for k in sd):
        sd = {k[len("module."):]: v for k, v in sd.items()}

    header = {"__metadata__": {"format": "pt", "source": os.path.basename(src)}}
    chunks, offset = [], 0
    for name, t in sd.items():
        stored = to_storable(name, t)
        if stored is None:
            continue
        dtype, t = stored
        data = tensor_bytes(t)
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    tmp = dst + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)
    os.replace(tmp, dst)
    print("wrote %s: %d tensors, %.1f MB" % (dst, len(header) - 1, (8 + len(text) + offset) / 1e6))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
