"""Golden cases of Scale (layers/scale.cpp)."""

from layer_cases.common import REDUCTION, rng_for, f32, Case, compute, case


def scale_case(name, shape, config, scale_shape, bias, second_bottom=False, desc=""):
    rng = rng_for(name)
    c = Case(name, "Scale", config, tol=REDUCTION, desc=desc)
    c.inputs = [f32(rng.standard_normal(shape))]
    if second_bottom:
        c.inputs.append(f32(rng.standard_normal(scale_shape)))
    else:
        c.params["weight"] = f32(rng.standard_normal(scale_shape))
        c.learnable.append("weight")
    if bias:
        c.params["bias"] = f32(rng.standard_normal(scale_shape))
        c.learnable.append("bias")
    c.grad_inputs = list(range(len(c.inputs)))

    def fn(x, p):
        axis = next(a for a in range(len(shape)) if tuple(shape[a:a + len(scale_shape)]) == tuple(scale_shape))
        view = (1,) * axis + tuple(scale_shape) + (1,) * (len(shape) - axis - len(scale_shape))
        s = x[1] if second_bottom else p["weight"]
        y = x[0] * s.reshape(view)
        if bias:
            y = y + p["bias"].reshape(view)
        return y

    compute(c, fn, rng)
    return c


@case
def scale_bias():
    return scale_case("scale_bias", (2, 3, 4, 5), "scale_param { bias_term: true }", (3,), True,
                      desc="Scale per channel with bias")


@case
def scale_nobias():
    return scale_case("scale_nobias", (4, 3), "", (3,), False, desc="Scale per channel of [N, C]")


@case
def scale_bottom():
    return scale_case("scale_bottom", (2, 3, 4), "scale_param { axis: 0 }", (2, 3), False, second_bottom=True,
                      desc="Scale by a second bottom [N, C] on axis 0")
