#!/usr/bin/env python3
"""Writes the small bundled image folders data/images/train and data/images/val.

A few colour images per class in class subfolders (the layout the ImageData layer
and `strata embed --images` read), made from the bundled 8x8 digits
(data/digits, CC BY 4.0) so nothing is downloaded: each digit is upscaled
bicubically, given a per-class tint on a grey background and saved at a few
different sizes, as PNG and JPEG. They are for the fine-tuning prototxts' default
paths (models/*/finetune.prototxt) and for quick tries, not for measuring
anything.

    train/<class>/*.{png,jpg}   6 images per class
    val/<class>/*.{png,jpg}     3 images per class
    classes: digit0, digit1, digit2 (sorted by name -> labels 0, 1, 2)

Usage:  /usr/bin/python3 data/images/make_images.py   (numpy + PIL; deterministic)
"""

import os
import shutil
import sys

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
DIGITS = os.path.join(os.path.dirname(HERE), "digits")
CLASSES = [0, 1, 2]
PER_SPLIT = {"train": 6, "val": 3}
SIZES = [(64, 64), (80, 60), (60, 72)]  # (width, height): odd aspect ratios on purpose
TINTS = {0: (1.0, 0.35, 0.3), 1: (0.3, 0.9, 0.35), 2: (0.35, 0.45, 1.0)}


def render(img8, label, size, rng):
    grey = Image.fromarray((img8 * 255).astype(np.uint8), mode="L")
    big = np.asarray(grey.resize(size, Image.BICUBIC), dtype=np.float32) / 255.0
    tint = np.array(TINTS[label], dtype=np.float32)
    background = 0.15 + 0.1 * rng.random_sample()
    rgb = background + big[..., None] * (tint - background)
    return Image.fromarray((np.clip(rgb, 0, 1) * 255).round().astype(np.uint8), mode="RGB")


def main():
    images = np.load(os.path.join(DIGITS, "train_images.npy"))[:, 0]  # (N, 8, 8) in [0, 1]
    labels = np.load(os.path.join(DIGITS, "train_labels.npy"))
    rng = np.random.RandomState(20240607)
    for split in PER_SPLIT:
        shutil.rmtree(os.path.join(HERE, split), ignore_errors=True)
    taken = {c: 0 for c in CLASSES}
    count = 0
    for split, per_class in PER_SPLIT.items():
        for c in CLASSES:
            folder = os.path.join(HERE, split, "digit%d" % c)
            os.makedirs(folder)
            idx = np.flatnonzero(labels == c)[taken[c]:taken[c] + per_class]
            taken[c] += per_class
            for k, i in enumerate(idx):
                img = render(images[i], c, SIZES[k % len(SIZES)], rng)
                ext = "jpg" if k % 2 else "png"
                path = os.path.join(folder, "%s_%d_%02d.%s" % (split, c, k, ext))
                if ext == "jpg":
                    img.save(path, quality=90)
                else:
                    img.save(path, optimize=True)
                count += 1
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(HERE) for f in fs
                if not f.endswith(".py") and not f.endswith(".md"))
    print("wrote %d images under %s (%d bytes)" % (count, HERE, total))
    return 0


if __name__ == "__main__":
    sys.exit(main())
