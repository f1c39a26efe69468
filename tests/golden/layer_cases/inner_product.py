"""Golden cases of InnerProduct (layers/inner_product.cpp)."""

import numpy as np
import torch.nn.functional as F

from layer_cases.common import REDUCTION, rng_for, f32, Case, compute, case


def ip_case(name, shape, cout, axis=1, bias=True, transpose=False):
    rng = rng_for(name)
    opts = ["num_output: %d" % cout]
    if axis != 1:
        opts.append("axis: %d" % axis)
    if not bias:
        opts.append("bias_term: false")
    if transpose:
        opts.append("transpose: true")
    c = Case(name, "InnerProduct", "inner_product_param { %s }" % " ".join(opts), tol=REDUCTION)
    c.desc = "InnerProduct %s -> %d on axis %d%s%s" % (list(shape), cout, axis, "" if bias else ", no bias",
                                                      ", weight [in, out] (transpose)" if transpose else "")
    c.inputs = [f32(rng.standard_normal(shape))]
    c.grad_inputs = [0]
    k = int(np.prod(shape[axis:]))
    c.params["weight"] = f32(rng.standard_normal((k, cout) if transpose else (cout, k)) * 0.5)
    c.learnable = ["weight"]
    if bias:
        c.params["bias"] = f32(rng.standard_normal(cout))
        c.learnable.append("bias")

    def fn(x, p):
        flat = x[0].reshape(tuple(shape[:axis]) + (k,))
        return F.linear(flat, p["weight"].t() if transpose else p["weight"], p.get("bias"))

    compute(c, fn, rng)
    return c


@case
def ip_axis1_4d():
    return ip_case("ip_axis1_4d", (2, 3, 2, 2), 4)


@case
def ip_axis2():
    return ip_case("ip_axis2", (2, 3, 5), 4, axis=2)


@case
def ip_nobias():
    return ip_case("ip_nobias", (3, 6), 2, bias=False)


@case
def ip_transpose():
    return ip_case("ip_transpose", (2, 3, 4), 3, axis=-1, transpose=True)
