"""Golden cases of HingeLoss (layers/hinge_loss.cpp), written with torch ops
from Caffe's definition (hinge_loss_layer.cpp): t = max(0, 1 + delta * s) with
delta = -1 at the label and +1 elsewhere; loss = sum t / N (L1) or sum t^2 / N (L2)."""

import numpy as np
import torch

from layer_cases.common import REDUCTION, rng_for, f32, Case, compute, case, labels


def hinge_case(name, shape, label_shape, norm=None, loss_weight=1.0, desc=""):
    rng = rng_for(name)
    cfg = "hinge_loss_param { norm: %s }" % norm if norm else ""
    c = Case(name, "HingeLoss", cfg, tol=REDUCTION, desc=desc)
    n = shape[0]
    dim = int(np.prod(shape[1:]))
    lab = labels(rng, label_shape, dim)
    c.inputs = [f32(rng.standard_normal(shape) * 1.5), lab]
    c.grad_inputs = [0]
    c.loss_weight = loss_weight
    delta = np.ones((n, dim))
    delta[np.arange(n), lab.reshape(-1).astype(np.int64)] = -1.0
    delta = torch.tensor(delta)

    def fn(x, p):
        t = torch.clamp(1.0 + delta * x[0].reshape(n, dim), min=0.0)
        return (t if norm != "L2" else t * t).sum() / n

    compute(c, fn, rng)
    return c


@case
def hinge_l1():
    return hinge_case("hinge_l1", (5, 4), (5,), desc="HingeLoss, norm L1 (default)")


@case
def hinge_l2():
    return hinge_case("hinge_l2", (4, 3, 1, 1), (4, 1, 1, 1), norm="L2", loss_weight=2.0,
                      desc="HingeLoss, norm L2, Caffe's [N, C, 1, 1] layout, loss_weight 2")
