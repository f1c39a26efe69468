"""Golden cases of Crop (layers/crop.cpp): bottom 0 sliced to bottom 1's
shape from crop_param.axis on, at the offsets (Caffe's rules: none = 0, one
= the same for every cropped axis). Bottom 1 takes no gradient."""

from layer_cases.common import EXACT, rng_for, f32, Case, compute, case


def crop_case(name, shape, ref, axis, offsets, config, desc):
    rng = rng_for(name)
    c = Case(name, "Crop", config, tol=EXACT, desc=desc)
    c.inputs = [f32(rng.standard_normal(shape)), f32(rng.standard_normal(ref))]
    c.grad_inputs = [0]
    a = axis % len(shape)
    offs = [0] * len(shape)
    for d in range(a, len(shape)):
        offs[d] = 0 if not offsets else offsets[0] if len(offsets) == 1 else offsets[d - a]

    def fn(x, p):
        idx = tuple(slice(offs[d], offs[d] + (ref[d] if d >= a else shape[d])) for d in range(len(shape)))
        return x[0][idx]

    compute(c, fn, rng)
    return c


@case
def crop_spatial_fcn():
    return crop_case("crop_spatial_fcn", (2, 3, 7, 6), (2, 1, 4, 3), 2, [2], "crop_param { axis: 2 offset: 2 }",
                     "Crop H and W to bottom 1's at offset 2 (FCN's spelling); channels kept")


@case
def crop_per_axis_offsets():
    return crop_case("crop_per_axis_offsets", (2, 4, 5, 6), (2, 2, 3, 4), 1, [1, 0, 2],
                     "crop_param { axis: 1 offset: 1 offset: 0 offset: 2 }", "Crop C, H, W with one offset each")


@case
def crop_default():
    return crop_case("crop_default", (1, 2, 5, 5), (1, 2, 3, 4), 2, [], "",
                     "Crop with the defaults: axis 2, offset 0")
