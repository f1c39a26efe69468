"""Golden cases of Reduction (layers/reduction.cpp): torch sums over the
axes from reduction_param.axis on, times coeff."""

from layer_cases.common import REDUCTION, rng_for, f32, Case, compute, case


def reduction_case(name, shape, op, axis, coeff, desc):
    rng = rng_for(name)
    opts = ["operation: %s" % op, "axis: %d" % axis]
    if coeff != 1.0:
        opts.append("coeff: %g" % coeff)
    c = Case(name, "Reduction", "reduction_param { %s }" % " ".join(opts), tol=REDUCTION, desc=desc)
    x = rng.standard_normal(shape)
    x[abs(x) < 0.05] = 0.5  # away from ASUM's kink at 0
    c.inputs = [f32(x)]
    c.grad_inputs = [0]
    a = axis % len(shape)
    dims = tuple(range(a, len(shape)))

    def fn(x, p):
        v = x[0]
        if op == "SUM":
            r = v.sum(dims)
        elif op == "ASUM":
            r = v.abs().sum(dims)
        elif op == "SUMSQ":
            r = (v * v).sum(dims)
        else:
            r = v.mean(dims)
        r = r * coeff
        # A 0-d top is stored as [1] (.npy files of 0-d arrays are [1] here too).
        return r.reshape(1) if r.dim() == 0 else r

    compute(c, fn, rng)
    return c


@case
def reduction_sum_all():
    return reduction_case("reduction_sum_all", (3, 4), "SUM", 0, 1.0, "Reduction SUM of everything (axis 0): a scalar")


@case
def reduction_asum():
    return reduction_case("reduction_asum", (2, 3, 4), "ASUM", 1, -0.5, "Reduction ASUM from axis 1, coeff -0.5")


@case
def reduction_sumsq():
    return reduction_case("reduction_sumsq", (2, 3, 4), "SUMSQ", 2, 2.0, "Reduction SUMSQ of the last axis, coeff 2")


@case
def reduction_mean():
    return reduction_case("reduction_mean", (2, 5, 3), "MEAN", -2, 1.0, "Reduction MEAN from axis -2")
