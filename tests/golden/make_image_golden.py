#!/usr/bin/env python3
"""Golden data for tests/image_data_test.cpp: small images and what PIL and
torchvision make of them.

    /usr/bin/python3 tests/golden/make_image_golden.py

Needs PIL, NumPy and torchvision (0.14 here); the C++ test does not need
Python. Rewrites tests/golden/images/ (the images) and tests/golden/image/
(the .npy results). Deterministic: the pixels come from a fixed seed and the
encoders are lossless except JPEG, whose bytes depend on the libjpeg version.

For every image <name>.<ext>:
  image/<name>.decoded.npy        uint8 H x W x 3: PIL's Image.open().convert("RGB")
  image/<name>.bilinear20.npy     uint8: torchvision Resize(20, BILINEAR) of the decoded image
  image/<name>.bicubic20.npy      uint8: torchvision Resize(20, BICUBIC)
  image/<name>.imagenet.npy       float32 3 x 16 x 16: Resize(20) CenterCrop(16) ToTensor Normalize(ImageNet)
  image/<name>.vit.npy            float32 3 x 16 x 16: Resize(20, BICUBIC) CenterCrop(16) ToTensor Normalize(0.5, 0.5)
  image/<name>.padcrop.npy        float32 3 x 31 x 27: CenterCrop((31, 27)) ToTensor (zero padding where larger)
"""
import os
import shutil

import numpy as np
from PIL import Image
import torchvision.transforms as T

HERE = os.path.dirname(os.path.abspath(__file__))
IMAGES = os.path.join(HERE, "images")
OUT = os.path.join(HERE, "image")

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def smooth_rgb(rng, h, w, channels=3):
    """Gradients plus blobs plus a little noise: photo-like, so JPEG artefacts are typical."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    out = np.zeros((h, w, channels))
    for c in range(channels):
        a, b, p = rng.uniform(-1, 1, 3)
        out[..., c] = 128 + 60 * np.sin(a * x / 3 + b * y / 4 + p) + 40 * np.cos((x - y * a) / 7)
    out += rng.normal(0, 12, out.shape)
    return np.clip(out, 0, 255).astype(np.uint8)


def make_images():
    rng = np.random.default_rng(20261121)
    specs = [
        ("rgb", "png", (29, 37), "RGB"),        # landscape, downscale to 20
        ("photo", "jpg", (41, 50), "RGB"),      # JPEG 4:2:0, downscale
        ("tiny", "jpg", (9, 12), "RGB"),        # JPEG, upscale
        ("small", "bmp", (23, 19), "RGB"),      # portrait, upscale
        ("gray", "png", (26, 33), "L"),         # one channel
        ("alpha", "png", (35, 28), "RGBA"),     # alpha is dropped by convert("RGB")
    ]
    files = []
    for name, ext, (h, w), mode in specs:
        channels = {"RGB": 3, "L": 1, "RGBA": 4}[mode]
        px = smooth_rgb(rng, h, w, channels)
        img = Image.fromarray(px[..., 0] if channels == 1 else px, mode)
        path = os.path.join(IMAGES, f"{name}.{ext}")
        if ext == "jpg":
            img.save(path, quality=90)
        else:
            img.save(path)
        files.append((name, path))
    return files


def save(name, kind, array):
    np.save(os.path.join(OUT, f"{name}.{kind}.npy"), np.ascontiguousarray(array))


def main():
    for d in (IMAGES, OUT):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    for name, path in make_images():
        img = Image.open(path).convert("RGB")  # what torchvision's ImageFolder loader does
        save(name, "decoded", np.asarray(img))
        bil = T.Resize(20, interpolation=T.InterpolationMode.BILINEAR)(img)
        bic = T.Resize(20, interpolation=T.InterpolationMode.BICUBIC)(img)
        save(name, "bilinear20", np.asarray(bil))
        save(name, "bicubic20", np.asarray(bic))
        imagenet = T.Compose([T.Resize(20), T.CenterCrop(16), T.ToTensor(),
                              T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])(img)
        vit = T.Compose([T.Resize(20, interpolation=T.InterpolationMode.BICUBIC), T.CenterCrop(16),
                         T.ToTensor(), T.Normalize((0.5,) * 3, (0.5,) * 3)])(img)
        pad = T.Compose([T.CenterCrop((31, 27)), T.ToTensor()])(img)
        save(name, "imagenet", imagenet.numpy().astype(np.float32))
        save(name, "vit", vit.numpy().astype(np.float32))
        save(name, "padcrop", pad.numpy().astype(np.float32))
        print(f"{path}: {img.size[0]}x{img.size[1]} -> resize 20: {bil.size[0]}x{bil.size[1]}")


if __name__ == "__main__":
    main()
