#!/usr/bin/python3
"""The PyTorch side of tools/bench/run_gpu_bench.py: training or inference
throughput of VGG-16, ViT-B/16 and cifar_vgg on synthetic data, eager or
torch.compile, in a precision, with the peak memory torch.cuda reports.

  python3 tools/bench/torch_throughput.py --task train --models vgg16,vit_b16 \\
      --device cuda --precision BF16 [--compile]
  python3 tools/bench/torch_throughput.py --versions

Prints one JSON object per model: {"impl": "pytorch-eager" | "pytorch-compile",
"task", "model", "batch", "precision", "samples_per_s" (median of --repeats
timed runs of --iters steps), "runs", "first_step_s" (the first warm-up
step: with --compile, compilation is in it), "peak_allocated_bytes" (the
whole run's), "steady_peak_allocated_bytes" (the timed steps' only)}, or
{"model", "error"} when that model fails (the others still run).

Precisions, as PyTorch users run them: FP32 (TF32 off for matmul and cuDNN),
TF32 (allow_tf32 on both), BF16 (torch.autocast bfloat16), FP16
(torch.autocast float16, with a GradScaler when training). cuDNN's
benchmark mode is on. --compile compiles the model with torch.compile in
its default mode; the optimizer step stays eager. Training is SGD with
momentum 0.9 and weight decay 5e-4 and cross-entropy against labels in
0..9, as strata_bench_train does.

Runs with Debian's torch 1.13 on the CPU (FP32; no torch.compile there) and
with PyTorch 2.x on a GPU."""
import argparse
import contextlib
import json
import os
import sys
import time
import traceback

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_train_throughput import cifar_vgg, vgg16  # noqa: E402  (the models strata_bench_train mirrors)


class EncoderBlock(nn.Module):
    """torchvision's ViT encoder block (pre-norm; attention through
    nn.MultiheadAttention, whose need_weights=False path is PyTorch's fused
    scaled-dot-product attention in 2.x)."""

    def __init__(self, dim=768, heads=12, mlp=3072):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=1e-6)
        self.self_attention = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp), nn.GELU(), nn.Linear(mlp, dim))

    def forward(self, x):
        y = self.ln_1(x)
        y, _ = self.self_attention(y, y, y, need_weights=False)
        x = x + y
        return x + self.mlp(self.ln_2(x))


class VitB16(nn.Module):
    """torchvision's vit_b_16 written out (models/vit_b16): 16x16 patches,
    a class token, learned position embeddings, 12 blocks, 1000 logits;
    without torchvision, which a PyTorch install need not have."""

    def __init__(self, image=224, patch=16, dim=768, depth=12, classes=1000):
        super().__init__()
        tokens = (image // patch) ** 2 + 1
        self.conv_proj = nn.Conv2d(3, dim, patch, stride=patch)
        self.class_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embedding = nn.Parameter(torch.empty(1, tokens, dim).normal_(std=0.02))
        self.layers = nn.Sequential(*[EncoderBlock(dim) for _ in range(depth)])
        self.ln = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.conv_proj(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embedding
        return self.head(self.ln(self.layers(x))[:, 0])


def resnet50():
    """torchvision's resnet50 (v1.5), as models/resnet50/benchmark.prototxt
    writes it (BatchNorm and Scale for each BatchNorm2d)."""
    import torchvision  # only this model needs it
    return torchvision.models.resnet50()


# name: (constructor, per-sample shape, CPU batch, GPU batch), as strata_bench_train / strata_bench_infer
MODELS = {"cifar_vgg": (cifar_vgg, (3, 32, 32), 32, 128), "vgg16": (vgg16, (3, 224, 224), 8, 64),
          "vit_b16": (VitB16, (3, 224, 224), 8, 64), "resnet50": (resnet50, (3, 224, 224), 8, 64)}
AUTOCAST = {"BF16": torch.bfloat16, "FP16": torch.float16}


def has_compile():
    return hasattr(torch, "compile")


def set_precision_flags(on_gpu, precision):
    if on_gpu:
        torch.backends.cuda.matmul.allow_tf32 = precision == "TF32"
        torch.backends.cudnn.allow_tf32 = precision == "TF32"
        torch.backends.cudnn.benchmark = True


def grad_scaler():
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler("cuda")
    return torch.cuda.amp.GradScaler()


def bench(name, task, a):
    make, shape, cpu_batch, gpu_batch = MODELS[name]
    on_gpu = a.device.startswith("cuda")
    batch = a.batch or (gpu_batch if on_gpu else cpu_batch)
    set_precision_flags(on_gpu, a.precision)
    if on_gpu:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(a.device)
    torch.manual_seed(0)
    model = make().to(a.device)
    x = torch.randn(batch, *shape, device=a.device)
    y = torch.randint(0, 10, (batch,), device=a.device)
    # A plain nullcontext outside autocast rather than torch.autocast(...,
    # enabled=False), which asserts on a PyTorch built without CUDA.
    if on_gpu and a.precision in AUTOCAST:
        def precision_scope():
            return torch.autocast("cuda", dtype=AUTOCAST[a.precision])
    elif a.precision == "BF16":
        # The CPU's autocast: convolutions and matmuls in bf16, their outputs kept in bf16.
        def precision_scope():
            return torch.autocast("cpu", dtype=torch.bfloat16)
    else:
        precision_scope = contextlib.nullcontext
    run_model = torch.compile(model) if a.compile else model

    if task == "train":
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
        loss_fn = nn.CrossEntropyLoss()
        scaler = grad_scaler() if on_gpu and a.precision == "FP16" else None

        def step():
            opt.zero_grad(set_to_none=False)
            with precision_scope():
                loss = loss_fn(run_model(x), y)
            if scaler:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
        grad_mode = contextlib.nullcontext
    else:
        model.eval()

        def step():
            with precision_scope():
                run_model(x)
        grad_mode = torch.inference_mode

    def sync():
        if on_gpu:
            torch.cuda.synchronize()

    with grad_mode():
        t0 = time.perf_counter()
        step()
        sync()
        first_step_s = time.perf_counter() - t0
        for _ in range(a.warmup):
            step()
        sync()
        if on_gpu:  # the steady peak: that of the timed steps (cuDNN's benchmark search is in the first)
            setup_peak = (torch.cuda.max_memory_allocated(a.device), torch.cuda.max_memory_reserved(a.device))
            torch.cuda.reset_peak_memory_stats(a.device)
        runs = []
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            for _ in range(a.iters):
                step()
            sync()
            runs.append(batch * a.iters / (time.perf_counter() - t0))
    row = {"impl": "pytorch-compile" if a.compile else "pytorch-eager", "task": task, "model": name, "batch": batch,
           "device": a.device, "precision": a.precision, "threads": torch.get_num_threads(),
           "samples_per_s": sorted(runs)[len(runs) // 2], "runs": runs, "first_step_s": first_step_s}
    if on_gpu:
        row["steady_peak_allocated_bytes"] = torch.cuda.max_memory_allocated(a.device)
        row["peak_allocated_bytes"] = max(setup_peak[0], row["steady_peak_allocated_bytes"])
        row["peak_reserved_bytes"] = max(setup_peak[1], torch.cuda.max_memory_reserved(a.device))
    return row


def versions():
    v = {"torch": torch.__version__, "torch_cuda": torch.version.cuda, "compile": has_compile()}
    if torch.cuda.is_available():
        v["cudnn"] = torch.backends.cudnn.version()
        v["gpu"] = torch.cuda.get_device_name(0)
    return v


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--task", choices=["train", "infer"], default="train")
    p.add_argument("--models", default="vgg16,vit_b16,cifar_vgg")
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", default="FP32", choices=["FP32", "TF32", "BF16", "FP16"])
    p.add_argument("--compile", action="store_true", help="torch.compile the model (default mode)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch", type=int, default=0, help="0: the model's batch for the device")
    p.add_argument("--versions", action="store_true", help="print the library versions as JSON and exit")
    a = p.parse_args()
    if a.versions:
        print(json.dumps(versions()))
        return
    if a.compile and not has_compile():
        sys.exit(f"torch_throughput.py: --compile needs PyTorch 2 or newer; this is {torch.__version__}")
    if not a.device.startswith("cuda") and a.precision not in ("FP32", "BF16"):
        sys.exit(f"torch_throughput.py: --precision {a.precision} is for --device cuda; the CPU runs FP32 or BF16 "
                 "(CPU autocast)")
    torch.set_num_threads(a.threads)
    for m in a.models.split(","):
        if m not in MODELS:
            sys.exit(f"torch_throughput.py: unknown model '{m}' (known: {', '.join(MODELS)})")
        try:
            row = bench(m, a.task, a)
        except Exception as e:  # one model's failure (out of memory, a compile error) leaves the others' rows
            traceback.print_exc()
            row = {"model": m, "task": a.task, "precision": a.precision, "error": f"{type(e).__name__}: {e}"[:300]}
        print(json.dumps(row), flush=True)
        if a.device.startswith("cuda"):
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
