"""Golden cases of SoftmaxWithLoss (layers/softmax_with_loss.cpp)."""

import numpy as np
import torch
import torch.nn.functional as F

from layer_cases.common import REDUCTION, rng_for, f32, Case, compute, case, labels


def swl_reference(logits, lab, ignore, norm):
    """Caffe SoftmaxWithLoss: logits [N, C, *], labels [N, *] (any shape with that count)."""
    n, ch = logits.shape[0], logits.shape[1]
    inner = int(np.prod(logits.shape[2:])) if logits.dim() > 2 else 1
    z = logits.reshape(n, ch, inner)
    t = torch.tensor(lab.reshape(n, inner).astype(np.int64))
    ii = -100 if ignore is None else ignore
    total = F.cross_entropy(z, t, ignore_index=ii, reduction="sum")
    valid = int((t != ii).sum())
    denom = {"VALID": valid, "BATCH_SIZE": n, "FULL": n * inner, "NONE": 1}[norm]
    return total / max(denom, 1)


def swl_case(name, shape, label_shape, ignore=None, norm=None, loss_weight=1.0, prob_top=False, desc=""):
    rng = rng_for(name)
    opts = []
    if ignore is not None:
        opts.append("ignore_label: %d" % ignore)
    if norm is not None:
        opts.append("normalization: %s" % norm)
    cfg = "loss_param { %s }" % " ".join(opts) if opts else ""
    c = Case(name, "SoftmaxWithLoss", cfg, tol=REDUCTION, desc=desc)
    lab = labels(rng, label_shape, shape[1])
    if ignore is not None:
        lab.reshape(-1)[::3] = ignore  # a third of the positions ignored
    c.inputs = [f32(rng.standard_normal(shape) * 2), lab]
    c.grad_inputs = [0]
    c.loss_weight = loss_weight
    def fn(x, p):
        loss = swl_reference(x[0], lab, ignore, norm or "VALID")
        return [loss, F.softmax(x[0], dim=1)] if prob_top else loss

    compute(c, fn, rng)
    return c


@case
def softmax_loss_plain():
    return swl_case("softmax_loss_plain", (4, 5), (4,), desc="SoftmaxWithLoss [N, C], labels [N] = torch cross_entropy")


@case
def softmax_loss_ignore():
    return swl_case("softmax_loss_ignore", (6, 4), (6,), ignore=2, loss_weight=2.0,
                    desc="ignore_label 2, VALID normalisation, loss_weight 2 (= top diff 2)")


@case
def softmax_loss_spatial():
    return swl_case("softmax_loss_spatial", (2, 3, 2, 3), (2, 1, 2, 3), ignore=1,
                    desc="[N, C, H, W] logits, [N, 1, H, W] labels, ignore_label 1, VALID")


@case
def softmax_loss_prob_top():
    return swl_case("softmax_loss_prob_top", (3, 4), (3,), prob_top=True,
                    desc="second top: the probabilities; its gradient flows back through the softmax too")


@case
def softmax_loss_full():
    return swl_case("softmax_loss_full", (2, 3, 2, 2), (2, 1, 2, 2), ignore=0, norm="FULL",
                    desc="normalization FULL: divides by every position, ignored included")


@case
def softmax_loss_batch_size():
    return swl_case("softmax_loss_batch_size", (2, 4, 3), (2, 3), norm="BATCH_SIZE",
                    desc="normalization BATCH_SIZE: divides by N only")
