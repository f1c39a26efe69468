#!/usr/bin/python3
"""PyTorch reference for tools/bench: training throughput (forward + backward +
SGD update, float32) of the same models strata benchmarks, on synthetic data.

Prints one JSON object per model: {"model", "batch", "samples_per_s" (median
of --repeats timed runs), "runs": [...]}.
Run with Debian's /usr/bin/python3 (python3-torch)."""
import argparse
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


MODELS = {"mlp": (mlp, (1, 28, 28), 128), "lenet": (lenet, (1, 28, 28), 64),
          "cifar_vgg": (cifar_vgg, (3, 32, 32), 32)}


def bench(name, iters, warmup, repeats):
    make, shape, batch = MODELS[name]
    torch.manual_seed(0)
    model = make()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(batch, *shape)
    y = torch.randint(0, 10, (batch,))
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            step()
        runs.append(batch * iters / (time.perf_counter() - t0))
    runs_sorted = sorted(runs)
    return {"impl": "pytorch", "model": name, "batch": batch, "threads": torch.get_num_threads(),
            "samples_per_s": runs_sorted[len(runs) // 2], "runs": runs}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="mlp,lenet,cifar_vgg")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    for m in a.models.split(","):
        print(json.dumps(bench(m, a.iters, a.warmup, a.repeats)), flush=True)


if __name__ == "__main__":
    main()
