#!/usr/bin/python3
"""PyTorch reference for tools/bench: training throughput (forward + backward +
SGD update, float32) of the same models strata benchmarks, on synthetic data.

Prints one JSON object per model: {"model", "batch", "samples_per_s" (median
of --repeats timed runs), "runs": [...]}.
Run with Debian's /usr/bin/python3 (python3-torch).

On a GPU: --device cuda --precision FP32|TF32|BF16 (BF16 = torch.autocast
with bfloat16, TF32 = allow_tf32 for matmul and cuDNN); also reports
torch.cuda.max_memory_allocated / max_memory_reserved."""
import argparse
import contextlib
import json
import os
import time

import torch
import torch.nn as nn


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                         nn.Linear(512, 10))


def lenet():
    return nn.Sequential(nn.Conv2d(1, 20, 5), nn.MaxPool2d(2, 2), nn.Conv2d(20, 50, 5), nn.MaxPool2d(2, 2),
                         nn.Flatten(), nn.Linear(800, 500), nn.ReLU(), nn.Linear(500, 10))


def cifar_vgg():
    layers, c = [], 3
    for n in (64, 64, "M", 128, 128, "M", 256, 256, "M"):
        if n == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers += [nn.Conv2d(c, n, 3, padding=1), nn.ReLU(inplace=True)]
            c = n
    layers += [nn.Flatten(), nn.Linear(256 * 4 * 4, 256), nn.ReLU(inplace=True), nn.Dropout(0.5),
               nn.Linear(256, 10)]
    return nn.Sequential(*layers)


def vgg16():
    """torchvision's vgg16 (no batch norm), written out: models/vgg16."""
    layers, c = [], 3
    for n in (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"):
        if n == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers += [nn.Conv2d(c, n, 3, padding=1), nn.ReLU(inplace=True)]
            c = n
    layers += [nn.AdaptiveAvgPool2d(7), nn.Flatten(), nn.Linear(512 * 7 * 7, 4096), nn.ReLU(inplace=True),
               nn.Dropout(0.5), nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Dropout(0.5),
               nn.Linear(4096, 1000)]
    return nn.Sequential(*layers)


# name: (constructor, per-sample shape, CPU batch, GPU batch) as in train_throughput.cpp
MODELS = {"mlp": (mlp, (1, 28, 28), 128, 128), "lenet": (lenet, (1, 28, 28), 64, 64),
          "cifar_vgg": (cifar_vgg, (3, 32, 32), 32, 128), "vgg16": (vgg16, (3, 224, 224), 8, 64)}


def bench(name, iters, warmup, repeats, device="cpu", precision="FP32", batch=0):
    make, shape, cpu_batch, gpu_batch = MODELS[name]
    on_gpu = device.startswith("cuda")
    batch = batch or (gpu_batch if on_gpu else cpu_batch)
    if on_gpu:
        torch.backends.cuda.matmul.allow_tf32 = precision == "TF32"
        torch.backends.cudnn.allow_tf32 = precision == "TF32"
        torch.backends.cudnn.benchmark = True
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(0)
    model = make().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(batch, *shape, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    loss_fn = nn.CrossEntropyLoss()
    # BF16 is CUDA autocast; everything else runs without autocast. A plain
    # nullcontext rather than torch.autocast("cuda", enabled=False), which
    # asserts on a PyTorch built without CUDA (Debian's 1.13).
    if on_gpu and precision == "BF16":
        def precision_scope():
            return torch.autocast("cuda", dtype=torch.bfloat16)
    else:
        precision_scope = contextlib.nullcontext

    def step():
        opt.zero_grad(set_to_none=False)
        with precision_scope():
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    def sync():
        if on_gpu:
            torch.cuda.synchronize()

    for _ in range(warmup):
        step()
    sync()
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            step()
        sync()
        runs.append(batch * iters / (time.perf_counter() - t0))
    runs_sorted = sorted(runs)
    row = {"impl": "pytorch", "model": name, "batch": batch, "threads": torch.get_num_threads(),
           "device": device, "precision": precision, "samples_per_s": runs_sorted[len(runs) // 2], "runs": runs}
    if on_gpu:
        row["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
        row["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    return row


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="mlp,lenet,cifar_vgg")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", default="FP32", choices=["FP32", "TF32", "BF16"])
    p.add_argument("--batch", type=int, default=0)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    for m in a.models.split(","):
        print(json.dumps(bench(m, a.iters, a.warmup, a.repeats, a.device, a.precision, a.batch)), flush=True)


if __name__ == "__main__":
    main()
