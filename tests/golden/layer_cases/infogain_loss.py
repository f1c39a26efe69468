"""Golden cases of InfogainLoss (layers/infogain_loss.cpp), written with torch
ops from Caffe's definition (infogain_loss_layer.cpp): softmax over the axis,
loss = -sum_positions sum_c H[label, c] log p_c / divisor, H the third bottom."""

import numpy as np
import torch
import torch.nn.functional as F

from layer_cases.common import REDUCTION, rng_for, f32, Case, compute, case, labels


def infogain_case(name, shape, label_shape, axis=1, ignore=None, norm=None, loss_weight=1.0, prob_top=False,
                  identity=False, desc=""):
    rng = rng_for(name)
    opts = []
    if ignore is not None:
        opts.append("ignore_label: %d" % ignore)
    if norm is not None:
        opts.append("normalization: %s" % norm)
    cfg = "loss_param { %s }" % " ".join(opts) if opts else ""
    if axis != 1:
        cfg = ("infogain_loss_param { axis: %d } " % axis + cfg).strip()
    c = Case(name, "InfogainLoss", cfg, tol=REDUCTION, desc=desc)
    ax = axis % len(shape)
    ch = shape[ax]
    lab = labels(rng, label_shape, ch)
    if ignore is not None:
        lab.reshape(-1)[::3] = ignore
    h = np.eye(ch) if identity else rng.uniform(0.0, 2.0, size=(ch, ch))
    c.inputs = [f32(rng.standard_normal(shape) * 2), lab, f32(h)]
    c.grad_inputs = [0]
    c.loss_weight = loss_weight
    flat = torch.tensor(lab.reshape(-1).astype(np.int64))
    keep = flat != (-100 if ignore is None else ignore)
    outer = int(np.prod(shape[:ax]))
    positions = flat.numel()
    denom = {"VALID": int(keep.sum()), "BATCH_SIZE": outer, "FULL": positions, "NONE": 1}[norm or "VALID"]

    def fn(x, p):
        logp = F.log_softmax(x[0], dim=ax)
        rows = torch.movedim(logp, ax, -1).reshape(-1, ch)
        hm = x[2].detach()
        weights = hm[flat.clamp(min=0, max=ch - 1)]
        per = -(weights * torch.clamp(rows, min=float(np.log(np.float32(1e-20))))).sum(dim=1)
        loss = per[keep].sum() / max(denom, 1)
        return [loss, F.softmax(x[0], dim=ax)] if prob_top else loss

    compute(c, fn, rng)
    return c


@case
def infogain_plain():
    return infogain_case("infogain_plain", (4, 5), (4,), desc="InfogainLoss [N, C], random H >= 0, VALID")


@case
def infogain_identity():
    return infogain_case("infogain_identity", (3, 4), (3,), identity=True,
                         desc="H = identity: equals SoftmaxWithLoss")


@case
def infogain_spatial_ignore():
    return infogain_case("infogain_spatial_ignore", (2, 3, 2, 3), (2, 1, 2, 3), ignore=1, loss_weight=2.0,
                         desc="[N, C, H, W] scores, [N, 1, H, W] labels, ignore_label 1, VALID, loss_weight 2")


@case
def infogain_axis_last():
    return infogain_case("infogain_axis_last", (2, 3, 4), (2, 3), axis=-1, norm="BATCH_SIZE",
                         desc="infogain_loss_param axis -1, normalization BATCH_SIZE")


@case
def infogain_prob_top():
    return infogain_case("infogain_prob_top", (3, 4), (3,), norm="FULL", prob_top=True,
                         desc="second top: the probabilities, whose random gradient flows back through the softmax")
