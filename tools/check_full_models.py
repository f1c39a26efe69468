#!/usr/bin/env python3
"""Full-size check of the model zoo against torchvision (not run in CI: the weight
files are large). For VGG-16, VGG-16-BN and ViT-B/16 it

  1. builds torchvision's model with random weights (eval mode; for the ViT the
     zero-initialised head is redrawn so the logits mean something),
  2. writes its state dict as safetensors under torchvision's names in a temp dir,
  3. runs `strata embed` on models/<name>/deploy.prototxt with those weights (loaded
     through the name maps) on the same random input, once for the logits and once
     for the embedding (VGG: fc7 after ReLU; ViT: pre_logits),
  4. compares: max |strata - torch| / max |torch| must be <= --tolerance.

Usage:  /usr/bin/python3 tools/check_full_models.py [--strata build/strata] [--models vgg16,vgg16_bn,vit_b16]
Needs PyTorch + torchvision (apt-get install python3-torchvision), ~2 GB of temp space
and a few minutes on 2 cores. Prints one line per comparison and exits 1 on any failure.
"""

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torchvision

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def golden_module():
    """tests/golden/make_model_golden.py, for its safetensors writer and embedding helpers."""
    spec = importlib.util.spec_from_file_location(
        "make_model_golden", os.path.join(REPO, "tests", "golden", "make_model_golden.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(name, golden):
    torch.manual_seed(0)
    if name == "vgg16":
        model = torchvision.models.vgg16(weights=None).eval()
        return model, [("fc8", model), ("fc7", lambda x: golden.vgg_embedding(model, x))]
    if name == "vgg16_bn":
        model = torchvision.models.vgg16_bn(weights=None)
        golden.randomize(model, torch.Generator().manual_seed(1))  # non-trivial BN statistics
        model.eval()
        return model, [("fc8", model), ("fc7", lambda x: golden.vgg_embedding(model, x))]
    if name == "vit_b16":
        model = torchvision.models.vit_b_16(weights=None).eval()
        with torch.no_grad():
            model.heads.head.weight.normal_(0.0, 0.02)
            model.heads.head.bias.normal_(0.0, 0.02)
        return model, [("head", model), ("pre_logits", lambda x: golden.vit_embedding(model, x))]
    raise SystemExit("unknown model %r (vgg16, vgg16_bn, vit_b16)" % name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--strata", default=os.path.join(REPO, "build", "strata"))
    ap.add_argument("--models", default="vgg16,vgg16_bn,vit_b16")
    ap.add_argument("--tolerance", type=float, default=1e-4, help="on max error / max magnitude")
    ap.add_argument("--threads", type=int, default=0, help="for strata and torch (0: all cores)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    golden = golden_module()
    failed = False
    with tempfile.TemporaryDirectory(prefix="strata_full_models_") as tmp:
        x = torch.randn((1, 3, 224, 224), generator=torch.Generator().manual_seed(7))
        x_path = os.path.join(tmp, "input.npy")
        np.save(x_path, x.numpy())
        for name in args.models.split(","):
            model, outputs = build(name, golden)
            weights = os.path.join(tmp, name + ".safetensors")
            golden.write_safetensors(weights, model.state_dict())
            print("%s: %.1f M parameters, %d MB of weights" % (
                name, sum(p.numel() for p in model.parameters()) / 1e6, os.path.getsize(weights) >> 20),
                flush=True)
            for blob, fn in outputs:
                start = time.time()
                with torch.no_grad():
                    want = fn(x).numpy().reshape(1, -1)
                torch_s = time.time() - start
                out = os.path.join(tmp, "%s_%s.npy" % (name, blob))
                cmd = [args.strata, "embed", "--model", os.path.join(REPO, "models", name, "deploy.prototxt"),
                       "--weights", weights, "--layer", blob, "--input", x_path, "--out", out,
                       "--threads", str(args.threads)]
                start = time.time()
                run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                strata_s = time.time() - start
                if run.returncode != 0:
                    print("FAIL %s %s: strata exited %d:\n%s" % (name, blob, run.returncode, run.stdout))
                    failed = True
                    continue
                got = np.load(out).reshape(1, -1)
                if got.shape != want.shape:
                    print("FAIL %s %s: shape %s, torch %s" % (name, blob, got.shape, want.shape))
                    failed = True
                    continue
                scale = float(np.abs(want).max())
                err = float(np.abs(got - want).max()) / scale
                ok = err <= args.tolerance
                failed |= not ok
                print("%s %s %s: %d values, max |torch| %.4g, max error / max |torch| %.2e (tolerance %.0e); "
                      "torch %.1f s, strata embed %.1f s (incl. loading)" % (
                          "PASS" if ok else "FAIL", name, blob, want.size, scale, err, args.tolerance,
                          torch_s, strata_s), flush=True)
            del model
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
