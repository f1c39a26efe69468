#!/usr/bin/python3
"""Writes the position-embedding interpolation goldens under tests/golden/transfer/.

A ViT position embedding [1, prefix + gh*gw, D] resized to another patch grid
the way timm / torchvision fine-tuning does it: the grid part as a
[1, D, gh, gw] image through F.interpolate(mode='bicubic',
align_corners=False), the class token's row (prefix 1) kept as it is.
tests/transfer_finetune_test.cpp replays each case against
transfer::interpolate_position_embedding.

Run from anywhere:  /usr/bin/python3 tests/golden/make_transfer_golden.py
Deterministic (fixed seeds); needs PyTorch and NumPy, the C++ test does not.
Files: <case>_in.npy, <case>_out.npy (float32).
"""

import os
import shutil
import zlib

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "transfer")

# name: (prefix, from (gh, gw), to (gh, gw), D)
CASES = {
    "up_4x4_to_6x6_cls": (1, (4, 4), (6, 6), 5),
    "down_5x5_to_3x3_cls": (1, (5, 5), (3, 3), 4),
    "up_3x3_to_4x7_nocls": (0, (3, 3), (4, 7), 3),
}


def resize(pos, prefix, src, dst):
    d = pos.shape[-1]
    head, grid = pos[:, :prefix], pos[:, prefix:]
    grid = grid.reshape(1, src[0], src[1], d).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, size=dst, mode="bicubic", align_corners=False)
    grid = grid.permute(0, 2, 3, 1).reshape(1, dst[0] * dst[1], d)
    return torch.cat([head, grid], dim=1)


def main():
    shutil.rmtree(OUT_DIR, ignore_errors=True)
    os.makedirs(OUT_DIR)
    for name, (prefix, src, dst, d) in CASES.items():
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        pos = rng.standard_normal((1, prefix + src[0] * src[1], d)).astype(np.float32)
        out = resize(torch.from_numpy(pos).double(), prefix, src, dst).numpy().astype(np.float32)
        np.save(os.path.join(OUT_DIR, name + "_in.npy"), pos)
        np.save(os.path.join(OUT_DIR, name + "_out.npy"), out)
        print(name, pos.shape, "->", out.shape)


if __name__ == "__main__":
    main()
