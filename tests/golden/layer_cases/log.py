"""Golden cases of Log (layers/log.cpp): log_base(shift + scale * x)."""

import math

import torch

from layer_cases.common import ELEMENTWISE, rng_for, f32, Case, compute, case


def log_case(name, config, fn, desc):
    rng = rng_for(name)
    c = Case(name, "Log", config, tol=ELEMENTWISE, desc=desc)
    c.inputs = [f32(rng.uniform(0.05, 4.0, size=(2, 3, 4)))]
    c.grad_inputs = [0]
    compute(c, lambda x, p: fn(x[0]), rng)
    return c


@case
def log_natural():
    return log_case("log_natural", "", torch.log, "Log with defaults: ln x on positive inputs")


@case
def log_base10():
    return log_case("log_base10", "log_param { base: 10 scale: 2 shift: 0.5 }",
                    lambda x: torch.log10(0.5 + 2.0 * x), "log10(0.5 + 2 x)")


@case
def log_base2():
    return log_case("log_base2", "log_param { base: 2 }", lambda x: torch.log(x) / math.log(2.0), "log2 x")
