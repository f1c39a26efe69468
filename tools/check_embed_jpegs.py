#!/usr/bin/python3
"""`strata embed` on the bundled JPEGs (data/images) against torchvision doing
the same (PIL decode, resize, centre crop, normalise, forward to the
embedding), with the same random weights: torchvision's initialisation (seed
0), saved as safetensors and loaded by strata through its torchvision name
map. Not run in CI (the weights are large); a few minutes on 2 cores.

  /usr/bin/python3 tools/check_embed_jpegs.py [--strata build/strata] [--models vgg16,vit_b16]

Prints, per model, the largest and the median over images of
max |strata - torch| / max |torch|, and exits 1 when one exceeds --tolerance.
Needs PyTorch and torchvision (apt-get install python3-torchvision)."""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))
import torch_embed  # noqa: E402  (its model builder, transforms and safetensors writer)

MODELS = {
    # name: (deploy prototxt, blob, strata preset, weights format)
    "vgg16": ("models/vgg16/deploy.prototxt", "fc7", "imagenet", "torchvision-vgg"),
    "vit_b16": ("models/vit_b16/deploy.prototxt", "pre_logits", "vit", "torchvision-vit"),
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--strata", default=os.path.join(ROOT, "build", "strata"))
    p.add_argument("--models", default="vgg16,vit_b16")
    p.add_argument("--tolerance", type=float, default=1e-5)
    a = p.parse_args()
    jpegs = sorted(os.path.join(d, f) for d, _, files in os.walk(os.path.join(ROOT, "data", "images"))
                   for f in files if f.lower().endswith((".jpg", ".jpeg")))
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        images = os.path.join(tmp, "images")
        os.makedirs(images)
        for path in jpegs:  # one folder, names unique across the classes
            os.symlink(path, os.path.join(images, os.path.basename(os.path.dirname(path)) + "_" + os.path.basename(path)))
        paths = sorted(os.path.join(images, f) for f in os.listdir(images))
        for name in a.models.split(","):
            deploy, blob, preset, fmt = MODELS[name]
            weights = os.path.join(tmp, name + ".safetensors")
            torch.manual_seed(0)
            full = torch_embed.torchvision.models.vgg16() if name == "vgg16" else torch_embed.torchvision.models.vit_b_16()
            torch_embed.write_safetensors(weights, full.state_dict())
            model, transform = torch_embed.build(name)
            with torch.inference_mode():
                want = torch.cat([model(transform(torch_embed.Image.open(q).convert("RGB"))[None]) for q in paths])
            out = os.path.join(tmp, name + ".npy")
            cmd = [a.strata, "embed", "--model", os.path.join(ROOT, deploy), "--weights", weights, "--weights-format",
                   fmt, "--layer", blob, "--images", images, "--out", out, "--preset", preset, "--pool", "none"]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"strata embed failed:\n{' '.join(cmd)}\n{r.stderr}")
            got = np.load(out)
            with open(out[:-4] + ".paths.txt") as f:
                order = [os.path.basename(line.rstrip("\n")) for line in f]
            row = {os.path.basename(q): i for i, q in enumerate(paths)}
            want = want.numpy()[[row[o] for o in order]]
            rel = np.abs(got - want).max(axis=1) / np.abs(want).max(axis=1)
            ok = rel.max() <= a.tolerance
            failed |= not ok
            print(f"{name}: {len(paths)} JPEGs, max |strata - torch| / max |torch| per image: largest {rel.max():.2e}, "
                  f"median {np.median(rel):.2e} ({'ok' if ok else 'FAIL'}, tolerance {a.tolerance:g})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
