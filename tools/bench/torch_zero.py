#!/usr/bin/python3
"""PyTorch reference for tools/bench/run_zero_bench.py: data-parallel training
of the same model on synthetic zeros, N processes over gloo on this host,
one thread each: DistributedDataParallel with SGD (momentum 0.9), or the same
with ZeroRedundancyOptimizer (ZeRO stage 1: each rank keeps and updates its
part of the optimizer state). Rank 0 prints one JSON line: {"torch",
"images_per_s" (after the warm-up iterations, over all ranks), "max_rss_mib"
(rank 0's)}."""
import argparse
import json
import os
import resource
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

import torch_train_throughput as models  # the same model definitions as the training benchmark


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, a, port):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=a.nproc)
    make, chw = {"cifar_vgg": (models.cifar_vgg, (3, 32, 32)), "lenet": (models.lenet, (1, 28, 28)),
                 "mlp": (models.mlp, (1, 28, 28))}[a.model]
    torch.manual_seed(1)
    model = DistributedDataParallel(make())
    if a.zero:
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD, lr=0.001, momentum=0.9)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
    x = torch.zeros((a.batch,) + chw)
    y = torch.zeros(a.batch, dtype=torch.long)
    loss_fn = nn.CrossEntropyLoss()
    start = None
    for it in range(a.iters):
        if it == a.warmup:
            dist.barrier()
            start = time.perf_counter()
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    dist.barrier()
    seconds = time.perf_counter() - start
    if rank == 0:
        print(json.dumps({"torch": torch.__version__, "zero": a.zero,
                          "images_per_s": a.nproc * a.batch * (a.iters - a.warmup) / seconds,
                          "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="cifar_vgg")
    p.add_argument("--batch", type=int, default=32, help="per rank")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--iters", type=int, default=12)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--zero", action="store_true", help="ZeroRedundancyOptimizer around SGD")
    a = p.parse_args()
    mp.spawn(worker, args=(a, free_port()), nprocs=a.nproc, join=True)


if __name__ == "__main__":
    main()
