"""Golden cases of Softmax (layers/softmax.cpp)."""

import torch.nn.functional as F

from layer_cases.common import REDUCTION, rng_for, f32, Case, compute, case


@case
def softmax_axis1():
    name = "softmax_axis1"
    rng = rng_for(name)
    c = Case(name, "Softmax", "", tol=REDUCTION, desc="Softmax over channels of [N, C, H, W], with a large-logit row")
    x = rng.standard_normal((2, 4, 3, 2)) * 2
    x[1, :, 2, 1] = [1000, 998, -1000, 999]  # overflows exp() unless the max is subtracted
    c.inputs = [f32(x)]
    c.grad_inputs = [0]
    compute(c, lambda x, p: F.softmax(x[0], dim=1), rng)
    return c


@case
def softmax_axis_last():
    name = "softmax_axis_last"
    rng = rng_for(name)
    c = Case(name, "Softmax", "softmax_param { axis: -1 }", tol=REDUCTION, desc="Softmax over the last axis of [N, T, C]")
    c.inputs = [f32(rng.standard_normal((2, 3, 5)) * 2)]
    c.grad_inputs = [0]
    compute(c, lambda x, p: F.softmax(x[0], dim=-1), rng)
    return c
