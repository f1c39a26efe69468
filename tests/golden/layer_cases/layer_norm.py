"""Golden cases of LayerNorm (layers/layer_norm.cpp)."""

import numpy as np
import torch.nn.functional as F

from layer_cases.common import REDUCTION, rng_for, f32, Case, compute, case


def layer_norm_case(name, shape, axis=-1, eps=None):
    rng = rng_for(name)
    opts = []
    if axis != -1:
        opts.append("axis: %d" % axis)
    if eps is not None:
        opts.append("eps: %g" % eps)
    cfg = "layer_norm_param { %s }" % " ".join(opts) if opts else ""
    c = Case(name, "LayerNorm", cfg, tol=REDUCTION)
    a = axis % len(shape)
    norm_shape = tuple(shape[a:])
    d = int(np.prod(norm_shape))
    c.desc = "LayerNorm %s over dims %s (D = %d), eps %g" % (list(shape), list(norm_shape), d, eps or 1e-5)
    # Rows with a sizeable mean: the variance must not lose it to cancellation.
    c.inputs = [f32(rng.standard_normal(shape) * 2 + 3)]
    c.grad_inputs = [0]
    c.params["weight"] = f32(1 + 0.5 * rng.standard_normal(d))
    c.params["bias"] = f32(rng.standard_normal(d))
    c.learnable = ["weight", "bias"]
    e = 1e-5 if eps is None else eps
    compute(c, lambda x, p: F.layer_norm(x[0], norm_shape, p["weight"].reshape(norm_shape),
                                         p["bias"].reshape(norm_shape), e), rng)
    return c


@case
def layer_norm_last():
    return layer_norm_case("layer_norm_last", (2, 3, 8), eps=1e-6)


@case
def layer_norm_axis1():
    return layer_norm_case("layer_norm_axis1", (2, 3, 2, 2), axis=1)
