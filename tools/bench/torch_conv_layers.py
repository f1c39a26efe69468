#!/usr/bin/python3
"""PyTorch counterpart of strata_bench_conv (tools/bench/conv_layer_bench.cpp):
forward and backward (input and weight gradients) of single Conv2d layers,
timed many times; prints one JSON object per layer with the minimum and
median wall time and the minimum process CPU time, in milliseconds.

  /usr/bin/python3 tools/bench/torch_conv_layers.py --threads 2 --batch 32
"""
import argparse
import json
import time

import torch

CIFAR_VGG = ("3x32x32:64:3:1:1,64x32x32:64:3:1:1,64x16x16:128:3:1:1,128x16x16:128:3:1:1,"
             "128x8x8:256:3:1:1,256x8x8:256:3:1:1")


def bench(spec, batch, reps):
    chw, out, k, pad, stride = spec.split(":")
    c, h, w = (int(v) for v in chw.split("x"))
    conv = torch.nn.Conv2d(c, int(out), int(k), padding=int(pad), stride=int(stride))
    x = torch.randn(batch, c, h, w, requires_grad=True)
    y = conv(x)
    dy = torch.randn_like(y)
    fwd, bwd = [], []
    for r in range(reps + 2):
        w0, c0 = time.perf_counter(), time.process_time()
        y = conv(x)
        w1, c1 = time.perf_counter(), time.process_time()
        y.backward(dy)
        w2, c2 = time.perf_counter(), time.process_time()
        if r >= 2:
            fwd.append((w1 - w0, c1 - c0))
            bwd.append((w2 - w1, c2 - c1))
    med = lambda v: sorted(v)[len(v) // 2]
    row = {"impl": "pytorch " + torch.__version__, "layer": spec, "batch": batch, "threads": torch.get_num_threads()}
    for name, t in (("fwd", fwd), ("bwd", bwd)):
        row[name + "_ms_min"] = round(1e3 * min(a for a, _ in t), 3)
        row[name + "_ms_median"] = round(1e3 * med([a for a, _ in t]), 3)
        row[name + "_cpu_ms_min"] = round(1e3 * min(b for _, b in t), 3)
    return row


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", default=CIFAR_VGG)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--reps", type=int, default=20)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    for spec in a.layers.split(","):
        print(json.dumps(bench(spec, a.batch, a.reps)), flush=True)


if __name__ == "__main__":
    main()
