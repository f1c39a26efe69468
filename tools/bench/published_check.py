#!/usr/bin/env python3
"""Checks `strata estimate` against published scaling: predicts each
published setup from what its authors state (per-GPU throughput, batch per
GPU, GPUs per server, the links) and prints predicted against published
scaling efficiency, with the error per case. Standard library only.

    python3 tools/bench/published_check.py [--strata build/strata] [--markdown] [--commands]
    python3 tools/bench/published_check.py --beyond     (8 to 1024 A100 GPUs, docs/estimate.md)

Sources (docs/estimate.md, "Checked against published results", says more):
  horovod-16, horovod-64   Horovod's README, uber/horovod (now horovod/horovod) commit 1a43074
                           (2017-08-21), tables "4 servers with 4 Pascal GPUs each connected by
                           RoCE-capable 25 Gbit/s network" and "16 servers with 4 Pascal GPUs each
                           connected by plain 40 Gbit/s network"; batch 64 per GPU, single-GPU
                           images/s given per model.
  horovod-128              the same README at commit 6bb6a2d (2017-10-17): 32 servers of 4 Pascal
                           GPUs, RoCE-capable 25 Gbit/s: 90% (Inception V3, ResNet-101), 79% (VGG-16).
  horovod-512              docs/benchmarks.md at commit 8318a89 (2018-05-10): 128 servers of 4:
                           90%, 90%, 68%.
  goyal-256                Goyal et al., "Accurate, Large Minibatch SGD: Training ImageNet in
                           1 Hour", arXiv:1706.02677 (2017), abstract: ResNet-50, minibatch 8192 on
                           256 GPUs, "~90% scaling efficiency when moving from 8 to 256 GPUs".
Efficiency is speedup over one GPU / GPUs, except goyal-256: efficiency at 256 GPUs over
efficiency at 8 (one server), as the paper defines it.
"""

import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

MODELS = {
    "inception_v3": "models/inception_v3/benchmark.prototxt",
    "resnet101": "models/resnet101/benchmark.prototxt",
    "resnet50": "models/resnet50/benchmark.prototxt",
    "vgg16": "models/vgg16/benchmark.prototxt",
}

# Horovod's Pascal servers: 4 GPUs each; what joins them inside a server is
# not stated: PCIe 3.0 is assumed. One network adapter per server.
HOROVOD_SERVER = ["--gpus-per-node", "4", "--node-link", "pcie3", "--nics-per-node", "1"]
# Horovod's Tensor Fusion buffer (HOROVOD_FUSION_THRESHOLD, 64 MB by default).
HOROVOD_BUCKET = ["--bucket-mb", "64"]

# One run of strata estimate serves every case that shares model, throughput, batch and links.
# (id, model, images/s of one GPU, batch per GPU, --link, extra flags, [(GPUs, published efficiency, setup)])
RUNS = [
    # Horovod README, 16 GPUs on RoCE-capable 25 GbE: single-GPU baseline 134.4 / 119.4 / 130.9 images/s;
    # "TCP Horovod (allreduce on GPU with NCCL)" 14.8x / 14.1x / 10.0x,
    # "RDMA Horovod (allreduce on GPU with NCCL)" 15.0x / 14.6x / 13.7x.
    # The 128- and 512-GPU statements (RoCE-capable, so RDMA assumed) reuse the 16-GPU baselines.
    ("horovod", "inception_v3", 134.4, 64, "25gbe", HOROVOD_SERVER + HOROVOD_BUCKET,
     [(16, 14.8 / 16, "16 GPUs, TCP")]),
    ("horovod", "inception_v3", 134.4, 64, "25gbe-rdma", HOROVOD_SERVER + HOROVOD_BUCKET,
     [(16, 15.0 / 16, "16 GPUs, RDMA"), (128, 0.90, "128 GPUs, RoCE"), (512, 0.90, "512 GPUs, RoCE")]),
    ("horovod", "resnet101", 119.4, 64, "25gbe", HOROVOD_SERVER + HOROVOD_BUCKET,
     [(16, 14.1 / 16, "16 GPUs, TCP")]),
    ("horovod", "resnet101", 119.4, 64, "25gbe-rdma", HOROVOD_SERVER + HOROVOD_BUCKET,
     [(16, 14.6 / 16, "16 GPUs, RDMA"), (128, 0.90, "128 GPUs, RoCE"), (512, 0.90, "512 GPUs, RoCE")]),
    ("horovod", "vgg16", 130.9, 64, "25gbe", HOROVOD_SERVER + HOROVOD_BUCKET,
     [(16, 10.0 / 16, "16 GPUs, TCP")]),
    ("horovod", "vgg16", 130.9, 64, "25gbe-rdma", HOROVOD_SERVER + HOROVOD_BUCKET,
     [(16, 13.7 / 16, "16 GPUs, RDMA"), (128, 0.79, "128 GPUs, RoCE"), (512, 0.68, "512 GPUs, RoCE")]),
    # Horovod README, 64 GPUs on plain 40 GbE (TCP): baseline 148.8 / 136.0 / 149.6 images/s;
    # "TCP Horovod (allreduce on GPU with NCCL)" 53.3x / 56.9x / 40.7x.
    ("horovod", "inception_v3", 148.8, 64, "40gbe", HOROVOD_SERVER + HOROVOD_BUCKET,
     [(64, 53.3 / 64, "64 GPUs, 40 GbE TCP")]),
    ("horovod", "resnet101", 136.0, 64, "40gbe", HOROVOD_SERVER + HOROVOD_BUCKET,
     [(64, 56.9 / 64, "64 GPUs, 40 GbE TCP")]),
    ("horovod", "vgg16", 149.6, 64, "40gbe", HOROVOD_SERVER + HOROVOD_BUCKET,
     [(64, 40.7 / 64, "64 GPUs, 40 GbE TCP")]),
    # Goyal et al.: Big Basin servers of 8 P100 joined by NVLink, 50 Gb Ethernet between them,
    # 32 images per GPU (8192 on 256). Per-GPU throughput: 90 epochs of ImageNet-1k
    # (1,281,167 images) in 29 hours on 8 GPUs (NVIDIA's report of the paper) = 138 images/s.
    ("goyal", "resnet50", 90 * 1281167 / (29 * 3600.0) / 8, 32, "50gbe",
     ["--gpus-per-node", "8", "--node-link", "nvlink-p100", "--nics-per-node", "1"],
     [(256, 0.90, "8 -> 256 GPUs")]),
]

# "Beyond this machine": 8 to 1024 GPUs in servers of 8 on NVLink 3 (A100), from published
# per-GPU throughput. ResNet-50: 2470 images/s, one A100 80GB, mixed precision, batch 256
# (NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/README.md, "Training
# performance: NVIDIA DGX A100 (8x A100 80GB)"; batch from configs.yml). No A100 training number for
# VGG-16 or ViT-B/16 was found: they are scaled from ResNet-50's by their ratio in timm's training
# benchmark on one RTX 3090 (results/benchmark-train-amp-nchw-pt112-cu113-rtx3090.csv: resnet50
# 826.06, vgg16 465.36, vit_base_patch16_224 390.86 samples/s) -- an assumption.
A100_RESNET50 = 2470.0
BEYOND_MODELS = [("resnet50", A100_RESNET50), ("vgg16", A100_RESNET50 * 465.36 / 826.06),
                 ("vit_b16", A100_RESNET50 * 390.86 / 826.06)]
BEYOND_WORKERS = [8, 16, 32, 64, 128, 256, 512, 1024]
BEYOND_NETWORKS = [
    ("8 x ib-hdr per server (DGX A100)", "ib-hdr", "8"),
    ("1 x ib-hdr per server", "ib-hdr", "1"),
    ("1 x 100gbe per server", "100gbe", "1"),
]
MODELS["vit_b16"] = "models/vit_b16/benchmark.prototxt"

ROW = re.compile(r"^dp-ring\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)%")


def estimate(strata, model, throughput, batch, link, extra, workers):
    cmd = [strata, "estimate", "--model", os.path.join(ROOT, MODELS[model]), "--device-throughput",
           "%.4f" % throughput, "--batch", str(batch), "--link", link, "--strategy", "dp-ring",
           "--workers", ",".join(str(w) for w in workers)] + extra
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("%s failed:\n%s%s" % (" ".join(cmd), out.stdout[-3000:], out.stderr[-3000:]))
    eff = {}
    for line in out.stdout.splitlines():
        m = ROW.match(line)
        if m:
            eff[int(m.group(1))] = float(m.group(5)) / 100
    missing = [w for w in workers if w not in eff]
    if missing:
        sys.exit("no dp-ring row for %s workers in:\n%s" % (missing, out.stdout))
    return eff, " ".join(cmd[1:]).replace(ROOT + "/", "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = next((p for p in ("build/strata", "build-cpu/strata") if os.path.exists(os.path.join(ROOT, p))),
                   "build/strata")
    ap.add_argument("--strata", default=os.path.join(ROOT, default), help="the strata binary")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown (as docs/estimate.md has it)")
    ap.add_argument("--commands", action="store_true", help="also print each strata estimate command")
    ap.add_argument("--beyond", action="store_true",
                    help="instead: predictions for ResNet-50, VGG-16 and ViT-B/16 at 8 to 1024 A100 GPUs")
    args = ap.parse_args()
    if args.beyond:
        return beyond(args)

    rows = []
    for source, model, throughput, batch, link, extra, cases in RUNS:
        workers = sorted({1, 8} | {n for n, _, _ in cases})
        eff, cmd = estimate(args.strata, model, throughput, batch, link, extra, workers)
        if args.commands:
            print("strata " + cmd)
        for n, published, setup in cases:
            predicted = eff[n] / eff[8] if source == "goyal" else eff[n]
            rows.append((source, model, setup, throughput, batch, link, predicted, published))

    errors = sorted(abs(p - q) / q for *_, p, q in rows)
    if args.markdown:
        print("| source | model | setup | images/s per GPU | batch | link | predicted | published | error |")
        print("|---|---|---|---|---|---|---|---|---|")
        for source, model, setup, thr, batch, link, p, q in rows:
            print("| %s | %s | %s | %.1f | %d | `%s` | %.0f%% | %.0f%% | %+.0f%% |" %
                  (source, model, setup, thr, batch, link, 100 * p, 100 * q, 100 * (p - q) / q))
    else:
        print("%-8s %-13s %-20s %9s %5s %-11s %9s %9s %7s" %
              ("source", "model", "setup", "img/s/GPU", "batch", "link", "predicted", "published", "error"))
        for source, model, setup, thr, batch, link, p, q in rows:
            print("%-8s %-13s %-20s %9.1f %5d %-11s %8.1f%% %8.1f%% %+6.1f%%" %
                  (source, model, setup, thr, batch, link, 100 * p, 100 * q, 100 * (p - q) / q))
    print("error (predicted - published efficiency, relative): median %.1f%%, largest %.1f%% over %d cases" %
          (100 * errors[len(errors) // 2], 100 * errors[-1], len(errors)))


def beyond(args):
    print("| model | images/s per GPU | network between servers | " +
          " | ".join("%d" % w for w in BEYOND_WORKERS) + " |")
    print("|---|---|---|" + "---|" * len(BEYOND_WORKERS))
    for model, throughput in BEYOND_MODELS:
        for what, link, nics in BEYOND_NETWORKS:
            eff, cmd = estimate(args.strata, model, throughput, 256, link,
                                ["--gpus-per-node", "8", "--node-link", "nvlink-a100", "--nics-per-node", nics],
                                BEYOND_WORKERS)
            if args.commands:
                print("strata " + cmd)
            print("| %s | %.0f | %s | %s |" % (model, throughput, what,
                                                " | ".join("%.1f%%" % (100 * eff[w]) for w in BEYOND_WORKERS)))


if __name__ == "__main__":
    main()
