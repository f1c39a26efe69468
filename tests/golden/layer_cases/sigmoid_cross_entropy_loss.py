"""Golden cases of SigmoidCrossEntropyLoss (layers/sigmoid_cross_entropy_loss.cpp):
torch binary_cross_entropy_with_logits, summed and divided as Caffe normalises
(default BATCH_SIZE = N)."""

import numpy as np
import torch
import torch.nn.functional as F

from layer_cases.common import REDUCTION, rng_for, f32, Case, compute, case, with_large


def sce_case(name, shape, targets, ignore=None, norm=None, loss_weight=1.0, large=False, desc=""):
    rng = rng_for(name)
    opts = []
    if ignore is not None:
        opts.append("ignore_label: %d" % ignore)
    if norm is not None:
        opts.append("normalization: %s" % norm)
    cfg = "loss_param { %s }" % " ".join(opts) if opts else ""
    c = Case(name, "SigmoidCrossEntropyLoss", cfg, tol=REDUCTION, desc=desc)
    x = with_large(rng, shape) if large else f32(rng.standard_normal(shape) * 2)
    if targets == "binary":
        t = f32(rng.integers(0, 2, size=shape))
    else:
        t = f32(rng.uniform(0.0, 1.0, size=shape))
    if ignore is not None:
        t.reshape(-1)[::3] = ignore
    c.inputs = [x, t]
    c.grad_inputs = [0]
    c.loss_weight = loss_weight
    keep = torch.tensor(np.ones(shape) if ignore is None else (t != ignore).astype(np.float64))
    n = shape[0]
    count = int(np.prod(shape))
    denom = {"VALID": int(keep.sum()), "BATCH_SIZE": n, "FULL": count, "NONE": 1}[norm or "BATCH_SIZE"]

    def fn(xs, p):
        per = F.binary_cross_entropy_with_logits(xs[0], torch.tensor(t.astype(np.float64)), reduction="none")
        return (per * keep).sum() / max(denom, 1)

    compute(c, fn, rng)
    return c


@case
def sce_binary():
    return sce_case("sce_binary", (4, 3), "binary",
                    desc="0/1 targets, default normalization BATCH_SIZE (divides by N = 4)")


@case
def sce_soft_full():
    return sce_case("sce_soft_full", (2, 3, 2, 2), "soft", norm="FULL", loss_weight=2.0,
                    desc="targets in [0, 1], normalization FULL, loss_weight 2")


@case
def sce_ignore_valid():
    return sce_case("sce_ignore_valid", (3, 5), "binary", ignore=-1, norm="VALID",
                    desc="ignore_label -1 on a third of the targets, VALID normalization")


@case
def sce_large_logits():
    return sce_case("sce_large_logits", (3, 4, 2), "binary", large=True,
                    desc="logits up to +-1000: the stable form stays finite")
