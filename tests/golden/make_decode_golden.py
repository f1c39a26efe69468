#!/usr/bin/env python3
"""Golden data for the decoding tests in tests/image_decode_test.cpp: small
JPEG and PNG files of every kind PIL reads differently, and the pixels PIL
makes of each.

    /usr/bin/python3 tests/golden/make_decode_golden.py

Needs PIL (9.4 here, built on libjpeg-turbo 2.1) and NumPy; the C++ test
does not need Python. Rewrites tests/golden/decode/. Deterministic: the
pixels come from a fixed seed, the PNGs are written by this script (PIL
writes no 16-bit colour PNG), the JPEGs by PIL (their bytes depend on the
libjpeg version; the reference is whatever PIL decodes from the bytes kept).

For every file <name>.<ext>:
  decode/<name>.rgb.npy   uint8 H x W x 3: PIL's Image.open(path).convert("RGB"),
                          what torchvision's ImageFolder and strata embed's users see
"""
import os
import shutil
import struct
import zlib

import warnings

import numpy as np
from PIL import Image

# PIL's advice for palette images with transparency, irrelevant to convert("RGB").
warnings.filterwarnings("ignore", message="Palette images with Transparency")

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "decode")


def smooth(rng, h, w, channels, peak=255):
    """Gradients, waves and noise: photo-like, so JPEG's rounding shows everywhere."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    out = np.zeros((h, w, channels))
    for c in range(channels):
        a, b, p = rng.uniform(-1, 1, 3)
        out[..., c] = 0.5 + 0.3 * np.sin(a * x / 3 + b * y / 4 + p) + 0.15 * np.cos((x - y * a) / 7)
    out += rng.normal(0, 0.05, out.shape)
    return np.clip(np.rint(out * peak), 0, peak)


# ---- PNG, written by hand --------------------------------------------------------

def chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def write_png(path, rows, bit_depth, color_type, extra=b"", width=None):
    """rows: one bytes object per scanline, already packed at bit_depth (filter 0 added here)."""
    h = len(rows)
    samples = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color_type]
    width = width or len(rows[0]) * 8 // (bit_depth * samples)
    ihdr = struct.pack(">IIBBBBB", width, h, bit_depth, color_type, 0, 0, 0)
    raw = b"".join(b"\x00" + r for r in rows)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + extra + chunk(b"IDAT", zlib.compress(raw, 9))
                + chunk(b"IEND", b""))


def rows16(a):
    return [row.astype(">u2").tobytes() for row in a.reshape(a.shape[0], -1)]


def rows8(a):
    return [row.astype(np.uint8).tobytes() for row in a.reshape(a.shape[0], -1)]


def packed(a, bits):
    """Rows of values < 2**bits packed most significant first, rows padded to a byte."""
    out = []
    for row in a:
        acc, n, bs = 0, 0, bytearray()
        for v in row:
            acc = (acc << bits) | int(v)
            n += bits
            if n == 8:
                bs.append(acc)
                acc, n = 0, 0
        if n:
            bs.append(acc << (8 - n))
        out.append(bytes(bs))
    return out


def make_pngs(rng):
    d = OUT
    # 16-bit gray: PIL's mode "I"; convert("RGB") clips to 255 (values below 256 survive, 1000 becomes 255).
    g = smooth(rng, 11, 19, 1, 65535)[..., 0]
    g[0, :8] = [0, 1, 127, 255, 256, 1000, 40000, 65535]
    g[1:4, :] = np.clip(g[1:4, :] // 256, 0, 300)  # a band of small values, below and above 255
    write_png(f"{d}/png_gray16.png", rows16(g), 16, 0)
    # 16-bit gray with a tRNS colour: the same clipping, the transparency ignored.
    write_png(f"{d}/png_gray16_trns.png", rows16(g), 16, 0, chunk(b"tRNS", struct.pack(">H", 1000)))
    # 16-bit colour, with and without alpha, and gray+alpha: PIL keeps the high byte.
    write_png(f"{d}/png_rgb16.png", rows16(smooth(rng, 13, 17, 3, 65535)), 16, 2)
    write_png(f"{d}/png_rgba16.png", rows16(smooth(rng, 9, 14, 4, 65535)), 16, 6)
    write_png(f"{d}/png_graya16.png", rows16(smooth(rng, 10, 15, 2, 65535)), 16, 4)
    # 8-bit gray+alpha: alpha dropped, not composited.
    write_png(f"{d}/png_graya8.png", rows8(smooth(rng, 12, 21, 2)), 8, 4)
    # 8-bit gray with a tRNS gray value.
    write_png(f"{d}/png_gray8_trns.png", rows8(smooth(rng, 8, 13, 1)), 8, 0, chunk(b"tRNS", struct.pack(">H", 128)))
    # Palettes: 8-bit with partial tRNS (alpha ignored by convert("RGB")), 4-bit, 1-bit.
    pal = rng.integers(0, 256, (256, 3), dtype=np.uint8)
    idx = rng.integers(0, 256, (14, 23))
    trns = bytes(rng.integers(0, 256, 100, dtype=np.uint8))
    write_png(f"{d}/png_palette_trns.png", rows8(idx), 8, 3, chunk(b"PLTE", pal.tobytes()) + chunk(b"tRNS", trns))
    idx4 = rng.integers(0, 16, (9, 11))
    write_png(f"{d}/png_palette4.png", packed(idx4, 4), 4, 3, chunk(b"PLTE", pal[:16].tobytes()), 11)
    # Low bit depths of gray: scaled to 0..255 by PIL.
    write_png(f"{d}/png_gray2.png", packed(rng.integers(0, 4, (7, 13)), 2), 2, 0, b"", 13)
    write_png(f"{d}/png_gray1.png", packed(rng.integers(0, 2, (6, 19)), 1), 1, 0, b"", 19)


def make_jpegs(rng):
    d = OUT
    rgb = smooth(rng, 23, 37, 3).astype(np.uint8)
    Image.fromarray(rgb, "RGB").save(f"{d}/jpeg_420.jpg", quality=90, subsampling=2)
    Image.fromarray(rgb, "RGB").save(f"{d}/jpeg_444.jpg", quality=90, subsampling=0)
    Image.fromarray(rgb, "RGB").save(f"{d}/jpeg_422.jpg", quality=75, subsampling=1)
    big = smooth(rng, 48, 64, 3).astype(np.uint8)
    Image.fromarray(big, "RGB").save(f"{d}/jpeg_progressive.jpg", quality=80, progressive=True)
    Image.fromarray(smooth(rng, 17, 31, 1)[..., 0].astype(np.uint8), "L").save(f"{d}/jpeg_gray.jpg", quality=85)
    cmyk = smooth(rng, 13, 21, 4).astype(np.uint8)
    Image.fromarray(cmyk, "CMYK").save(f"{d}/jpeg_cmyk.jpg", quality=90)


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    rng = np.random.default_rng(20261127)
    make_pngs(rng)
    make_jpegs(rng)
    total = 0
    for name in sorted(os.listdir(OUT)):
        path = os.path.join(OUT, name)
        im = Image.open(path)
        rgb = np.asarray(im.convert("RGB"))
        stem = os.path.splitext(name)[0]
        np.save(os.path.join(OUT, f"{stem}.rgb.npy"), np.ascontiguousarray(rgb))
        total += os.path.getsize(path) + os.path.getsize(os.path.join(OUT, f"{stem}.rgb.npy"))
        print(f"{name}: PIL mode {im.mode}, {im.size[0]}x{im.size[1]}")
    print(f"{total} bytes in {OUT}")
    assert total < 200_000, "keep the decoding golden data small"


if __name__ == "__main__":
    main()
