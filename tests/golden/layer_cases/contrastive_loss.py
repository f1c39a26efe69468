"""Golden cases of ContrastiveLoss (layers/contrastive_loss.cpp), written with
torch ops from Caffe's definition (contrastive_loss_layer.cpp):
  loss = sum_n (y_n ? d_n^2 : max(margin - d_n, 0)^2) / (2 N)
  (legacy_version: max(margin - d_n^2, 0) for dissimilar pairs).
Caffe's backward divides by d + 1e-4 instead of d for dissimilar pairs; the
reference reproduces that gradient exactly (see caffe_distance) rather than
the exact derivative, which differs by 1e-4 / d relative."""

import numpy as np
import torch

from layer_cases.common import REDUCTION, rng_for, f32, Case, compute, case


def caffe_distance(dist_sq):
    """d = sqrt(dist_sq) in value, with the gradient of Caffe's d + 1e-4 denominator."""
    d = torch.sqrt(dist_sq)
    s = d.detach()
    return s + (d - s) * (s / (s + 1e-4))


def contrastive_case(name, n, c, margin=None, legacy=False, feature_scale=1.0, loss_weight=1.0, desc=""):
    rng = rng_for(name)
    opts = []
    if margin is not None:
        opts.append("margin: %g" % margin)
    if legacy:
        opts.append("legacy_version: true")
    cfg = "contrastive_loss_param { %s }" % " ".join(opts) if opts else ""
    case_ = Case(name, "ContrastiveLoss", cfg, tol=REDUCTION, desc=desc)
    y = f32(np.arange(n) % 2)  # alternately dissimilar (0) and similar (1)
    case_.inputs = [f32(rng.standard_normal((n, c)) * feature_scale),
                    f32(rng.standard_normal((n, c)) * feature_scale), y]
    case_.grad_inputs = [0, 1]
    case_.loss_weight = loss_weight
    m = 1.0 if margin is None else margin
    sim = torch.tensor(y.astype(np.float64))

    def fn(x, p):
        diff = x[0] - x[1]
        dist_sq = (diff * diff).sum(dim=1)
        if legacy:
            dis = torch.clamp(m - dist_sq, min=0.0)
        else:
            dis = torch.clamp(m - caffe_distance(dist_sq), min=0.0) ** 2
        return (sim * dist_sq + (1 - sim) * dis).sum() / (2.0 * n)

    compute(case_, fn, rng)
    return case_


@case
def contrastive_default():
    return contrastive_case("contrastive_default", 8, 3, feature_scale=0.3,
                            desc="margin 1 (default); features scaled so that some dissimilar pairs lie inside it")


@case
def contrastive_margin():
    return contrastive_case("contrastive_margin", 6, 4, margin=3.0, loss_weight=0.5,
                            desc="margin 3, loss_weight 0.5")


@case
def contrastive_legacy():
    return contrastive_case("contrastive_legacy", 8, 3, margin=6.0, legacy=True,
                            desc="legacy_version: max(margin - d^2, 0) for dissimilar pairs")
