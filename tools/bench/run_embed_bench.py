#!/usr/bin/python3
"""`strata embed` against torchvision doing the same work (decode JPEGs,
resize, centre crop, normalise, forward to the embedding blob), alternating
the two programs round by round on this machine, and a markdown table of
medians and per-round ratios for docs/benchmarks.md.

  /usr/bin/python3 tools/bench/run_embed_bench.py --build build --rounds 3

Both run the same random weights: torchvision's initialisation (seed 0),
saved as safetensors and loaded by strata through its torchvision name map.
The images: --images generated 500x375 JPEGs (smooth colours and noise,
quality 90) in a temporary folder. Both use every core for the forward pass
(torch.set_num_threads, strata --threads 0) and decode in the background
(strata's decode threads, one DataLoader worker process for PyTorch by
default: --workers)."""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODELS = {
    # name: (deploy prototxt, blob, strata preset, weights format, pooling)
    "vgg16": ("models/vgg16/deploy.prototxt", "fc7", "imagenet", "torchvision-vgg", "none"),
    "vit_b16": ("models/vit_b16/deploy.prototxt", "pre_logits", "vit", "torchvision-vit", "none"),
}


def make_images(folder, n, seed=0):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:375, 0:500].astype(np.float32)
    for i in range(n):
        a, b, c = rng.uniform(-1, 1, 3)
        base = np.stack([128 + 80 * np.sin(a * x / 40 + k + b * y / 30) for k in range(3)], axis=-1)
        img = np.clip(base + rng.normal(0, 10, base.shape), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(os.path.join(folder, f"img{i:04d}.jpg"), quality=90)


def run_strata(a, model, images, weights, out):
    deploy, blob, preset, fmt, pool = MODELS[model]
    cmd = [os.path.join(a.build, "strata"), "embed", "--model", os.path.join(ROOT, deploy), "--weights", weights,
           "--weights-format", fmt, "--layer", blob, "--images", images, "--out", out, "--batch", str(a.batch),
           "--pool", pool, "--preset", preset, "--threads", str(a.threads)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"strata embed failed:\n{' '.join(cmd)}\n{r.stderr}")
    m = re.search(r"([0-9.]+) images/s", r.stderr.strip().splitlines()[-1])
    return float(m.group(1))


def run_torch(a, model, images):
    cmd = [sys.executable, os.path.join(HERE, "torch_embed.py"), "--model", model, "--images", images,
           "--batch", str(a.batch), "--threads", str(a.threads), "--workers", str(a.workers)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"torch_embed.py failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])["images_per_s"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build")
    p.add_argument("--models", default="vgg16,vit_b16")
    p.add_argument("--images", type=int, default=64)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--workers", type=int, default=1)
    a = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        images = os.path.join(tmp, "images")
        os.makedirs(images)
        make_images(images, a.images)
        for model in a.models.split(","):
            weights = os.path.join(tmp, f"{model}.safetensors")
            subprocess.run([sys.executable, os.path.join(HERE, "torch_embed.py"), "--model", model, "--images",
                            images, "--save-weights", weights], check=True)
            s_rates, t_rates = [], []
            for r in range(a.rounds):
                s_rates.append(run_strata(a, model, images, weights, os.path.join(tmp, "out.npy")))
                t_rates.append(run_torch(a, model, images))
                print(f"{model} round {r + 1}: strata {s_rates[-1]:.2f} images/s, "
                      f"PyTorch {t_rates[-1]:.2f} images/s", file=sys.stderr)
            ratios = [s / t for s, t in zip(s_rates, t_rates)]
            rows.append((model, statistics.median(s_rates), statistics.median(t_rates),
                         statistics.median(s_rates) / statistics.median(t_rates), ratios))
    print(f"\n{a.images} JPEGs 500x375, batch {a.batch}, {a.threads} threads, {a.rounds} rounds alternating\n")
    print("| model | strata images/s | PyTorch images/s | strata / PyTorch | per-round ratios |")
    print("|---|---|---|---|---|")
    for model, s, t, ratio, ratios in rows:
        print(f"| {model} | {s:.2f} | {t:.2f} | {ratio:.2f} | {', '.join(f'{x:.2f}' for x in ratios)} |")


if __name__ == "__main__":
    main()
