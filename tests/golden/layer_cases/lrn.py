"""Golden cases of LRN (layers/lrn.cpp).

ACROSS_CHANNELS is torch's local_response_norm (Caffe and PyTorch both divide
alpha by local_size). WITHIN_CHANNEL is Caffe's construction: AVE pooling of
x^2 over a local_size x local_size window (stride 1, zero padding counted,
so alpha is divided by local_size^2), then (1 + alpha * that)^-beta; k does
not enter it."""

import torch.nn.functional as F

from layer_cases.common import REDUCTION, rng_for, f32, Case, compute, case


def lrn_case(name, shape, size, alpha, beta, k=None, within=False, scale=1.0, desc=""):
    rng = rng_for(name)
    opts = ["local_size: %d" % size, "alpha: %g" % alpha, "beta: %g" % beta]
    if k is not None:
        opts.append("k: %g" % k)
    if within:
        opts.append("norm_region: WITHIN_CHANNEL")
    c = Case(name, "LRN", "lrn_param { %s }" % " ".join(opts), tol=REDUCTION, desc=desc)
    c.inputs = [f32(rng.standard_normal(shape) * scale)]
    c.grad_inputs = [0]

    def fn(x, p):
        if not within:
            return F.local_response_norm(x[0], size, alpha=alpha, beta=beta, k=1.0 if k is None else k)
        pad = (size - 1) // 2
        avg = F.avg_pool2d(x[0] * x[0], size, stride=1, padding=pad, count_include_pad=True)
        return x[0] * (1.0 + alpha * avg) ** (-beta)

    compute(c, fn, rng)
    return c


@case
def lrn_across_alexnet():
    return lrn_case("lrn_across_alexnet", (2, 7, 3, 4), 5, 1e-4, 0.75, scale=40.0,
                    desc="LRN ACROSS_CHANNELS with AlexNet's settings (local_size 5, alpha 1e-4, beta 0.75) on inputs of scale 40")


@case
def lrn_across_k2():
    return lrn_case("lrn_across_k2", (2, 6, 2, 3), 3, 0.8, 0.6, k=2.0,
                    desc="LRN ACROSS_CHANNELS, local_size 3, alpha 0.8, beta 0.6, k 2")


@case
def lrn_across_wide():
    return lrn_case("lrn_across_wide", (1, 3, 2, 2), 7, 2.0, 0.75,
                    desc="LRN ACROSS_CHANNELS whose window (7) is wider than the channels (3)")


@case
def lrn_within():
    return lrn_case("lrn_within", (2, 2, 5, 6), 3, 1.5, 0.75, within=True,
                    desc="LRN WITHIN_CHANNEL, local_size 3, alpha 1.5 (Caffe: AVE pooling of x^2, shift 1)")


@case
def lrn_within_k_ignored():
    return lrn_case("lrn_within_k_ignored", (1, 3, 4, 4), 5, 2.0, 0.5, k=3.0, within=True,
                    desc="LRN WITHIN_CHANNEL with k 3, which Caffe ignores there (its Power layer's shift is 1)")
