"""Golden cases of PReLU (layers/prelu.cpp): torch's prelu, per channel or
with one shared slope."""

import torch.nn.functional as F

from layer_cases.common import REDUCTION, rng_for, f32, Case, compute, case


def prelu_case(name, shape, shared, desc):
    rng = rng_for(name)
    c = Case(name, "PReLU", "prelu_param { channel_shared: true }" if shared else "", tol=REDUCTION, desc=desc)
    x = rng.standard_normal(shape)
    x[abs(x) < 0.05] = -0.5  # away from the kink at 0
    c.inputs = [f32(x)]
    c.grad_inputs = [0]
    c.params["weight"] = f32(rng.standard_normal(1 if shared else shape[1]) * 0.5)
    c.learnable = ["weight"]
    compute(c, lambda x, p: F.prelu(x[0], p["weight"]), rng)
    return c


@case
def prelu_channels():
    return prelu_case("prelu_channels", (2, 3, 3, 2), False, "PReLU with a slope per channel")


@case
def prelu_shared():
    return prelu_case("prelu_shared", (3, 4), True, "PReLU with one slope for all channels")
