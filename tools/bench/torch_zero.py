#!/usr/bin/python3
"""PyTorch reference for tools/bench/run_zero_bench.py: data-parallel training
of the same model on synthetic zeros, N processes over gloo on this host,
one thread each, SGD with momentum 0.9, as one of
  --mode ddp    DistributedDataParallel;
  --mode zero   the same with ZeroRedundancyOptimizer (ZeRO stage 1: each
                rank keeps and updates its part of the optimizer state);
  --mode fsdp   FSDP2's fully_shard (stage 3: parameters, gradients and
                optimizer state sharded; a unit's weights gathered while it
                runs), each layer its own unit (--fsdp-units layer: every
                convolution and linear layer, or each ViT block with the
                embedding and head apart), or the whole model one unit
                (--fsdp-units model). Needs torch >= 2.6 (PyPI's; Debian's
                1.13 has no CPU FSDP).
Models: cifar_vgg, lenet, mlp (tools/bench/torch_train_throughput.py) and
vit_ti16 (ViT-Ti/16 as models/vit_ti16/finetune.prototxt, which
run_zero_bench.py trains: D 192, 3 heads, MLP 768, 12 pre-norm blocks,
224x224, a head of 10 classes). Rank 0 prints one JSON line:
{"torch", "mode", "images_per_s" (after the warm-up iterations, over all
ranks), "max_rss_mib" (rank 0's)}."""
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


class VitTi16(nn.Module):
    """ViT-Ti/16 (models/vit_ti16): patch embedding, class token, learned
    positions, 12 pre-norm encoder blocks (GELU MLP), final LayerNorm, head."""

    def __init__(self, dim=192, heads=3, mlp=768, blocks=12, classes=10):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 16, 16)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, 197, dim))
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(dim, heads, mlp, dropout=0.0, activation="gelu", batch_first=True,
                                       norm_first=True) for _ in range(blocks))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x[:, 0]))


def fsdp_units(model, units):
    """The modules fully_shard wraps before the root: one per layer, or none."""
    if units == "model":
        return []
    if isinstance(model, VitTi16):
        return list(model.blocks) + [model.patch, model.head]
    return [m for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]


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
                 "mlp": (models.mlp, (1, 28, 28)), "vit_ti16": (VitTi16, (3, 224, 224))}[a.model]
    torch.manual_seed(1)
    if a.mode == "fsdp":
        from torch.distributed.fsdp import fully_shard  # torch >= 2.6
        model = make()
        for unit in fsdp_units(model, a.fsdp_units):
            fully_shard(unit)
        fully_shard(model)
    else:
        model = DistributedDataParallel(make())
    if a.mode == "zero":
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
        print(json.dumps({"torch": torch.__version__, "mode": a.mode,
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
    p.add_argument("--mode", default="ddp", choices=["ddp", "zero", "fsdp"])
    p.add_argument("--fsdp-units", default="layer", choices=["layer", "model"])
    a = p.parse_args()
    mp.spawn(worker, args=(a, free_port()), nprocs=a.nproc, join=True)


if __name__ == "__main__":
    main()
