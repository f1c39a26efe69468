"""Golden cases of Bias (layers/bias.cpp): x plus a bias broadcast over some
axes, from a learnable param or from a second bottom."""

from layer_cases.common import ELEMENTWISE, REDUCTION, rng_for, f32, Case, compute, case


def bias_case(name, shape, config, axis, bias_shape, second_bottom=False, desc=""):
    rng = rng_for(name)
    c = Case(name, "Bias", config, tol=REDUCTION, desc=desc)
    c.inputs = [f32(rng.standard_normal(shape))]
    if second_bottom:
        c.inputs.append(f32(rng.standard_normal(bias_shape)))
    else:
        c.params["bias"] = f32(rng.standard_normal(bias_shape))
        c.learnable = ["bias"]
    c.grad_inputs = list(range(len(c.inputs)))
    view = (1,) * axis + tuple(bias_shape) + (1,) * (len(shape) - axis - len(bias_shape))

    def fn(x, p):
        b = x[1] if second_bottom else p["bias"]
        return x[0] + b.reshape(view)

    compute(c, fn, rng)
    return c


@case
def bias_channel():
    return bias_case("bias_channel", (2, 3, 2, 2), "", 1, (3,), desc="Bias per channel (the defaults: axis 1, num_axes 1)")


@case
def bias_axes_all():
    return bias_case("bias_axes_all", (2, 3, 4), "bias_param { axis: 1 num_axes: -1 }", 1, (3, 4),
                     desc="Bias over every axis from 1 on")


@case
def bias_bottom():
    return bias_case("bias_bottom", (2, 3, 4), "bias_param { axis: 0 }", 0, (2, 3), second_bottom=True,
                     desc="Bias from a second bottom [N, C] on axis 0")
