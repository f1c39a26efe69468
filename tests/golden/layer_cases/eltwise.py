"""Golden cases of Eltwise (layers/eltwise.cpp)."""

import torch

from layer_cases.common import ELEMENTWISE, rng_for, f32, Case, compute, case


def eltwise_case(name, config, n, fn, positive=False, tol=ELEMENTWISE, desc=""):
    rng = rng_for(name)
    c = Case(name, "Eltwise", config, tol=tol, desc=desc)
    shape = (2, 3, 4)
    c.inputs = [f32(rng.uniform(0.5, 2.0, shape) if positive else rng.standard_normal(shape)) for _ in range(n)]
    c.grad_inputs = list(range(n))
    compute(c, lambda x, p: fn(x), rng)
    return c


@case
def eltwise_sum():
    return eltwise_case("eltwise_sum", "", 2, lambda x: x[0] + x[1], desc="Eltwise SUM (default)")


@case
def eltwise_sum_coeff():
    return eltwise_case("eltwise_sum_coeff", "eltwise_param { operation: SUM coeff: 1.5 coeff: -0.5 coeff: 2 }", 3,
                        lambda x: 1.5 * x[0] - 0.5 * x[1] + 2 * x[2], desc="Eltwise SUM with coeff")


@case
def eltwise_prod():
    return eltwise_case("eltwise_prod", "eltwise_param { operation: PROD }", 3, lambda x: x[0] * x[1] * x[2],
                        desc="Eltwise PROD of three")


@case
def eltwise_prod_divide():
    return eltwise_case("eltwise_prod_divide", "eltwise_param { operation: PROD stable_prod_grad: false }", 2,
                        lambda x: x[0] * x[1], positive=True, desc="Eltwise PROD, gradient by division")


@case
def eltwise_max():
    return eltwise_case("eltwise_max", "eltwise_param { operation: MAX }", 3,
                        lambda x: torch.maximum(torch.maximum(x[0], x[1]), x[2]), desc="Eltwise MAX of three")
