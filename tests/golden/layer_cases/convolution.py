"""Golden cases of Convolution (layers/convolution/convolution.cpp)."""

import torch.nn.functional as F

from layer_cases.common import REDUCTION, rng_for, f32, Case, compute, case, pair, hw_opt


def conv_case(name, shape, cout, k, stride=1, pad=0, dilation=1, group=1, bias=True, extra=""):
    rng = rng_for(name)
    kh, kw = pair(k)
    c = Case(name, "Convolution", "", tol=REDUCTION)
    ksz = "kernel_size: %d" % kh if kh == kw else "kernel_h: %d kernel_w: %d" % (kh, kw)
    opts = ["num_output: %d" % cout, ksz] + hw_opt("stride", stride, 1) + hw_opt("pad", pad, 0)
    if dilation != 1:
        opts.append("dilation: %d" % dilation)
    if group != 1:
        opts.append("group: %d" % group)
    if not bias:
        opts.append("bias_term: false")
    c.config = "convolution_param { %s%s }" % (" ".join(opts), extra)
    c.desc = "Convolution %s -> %d, kernel %dx%d stride %s pad %s dilation %d group %d%s" % (
        list(shape), cout, kh, kw, pair(stride), pair(pad), dilation, group, "" if bias else ", no bias")
    c.inputs = [f32(rng.standard_normal(shape))]
    c.grad_inputs = [0]
    c.params["weight"] = f32(rng.standard_normal((cout, shape[1] // group, kh, kw)) * 0.5)
    c.learnable = ["weight"]
    if bias:
        c.params["bias"] = f32(rng.standard_normal(cout))
        c.learnable.append("bias")
    compute(c, lambda x, p: F.conv2d(x[0], p["weight"], p.get("bias"), pair(stride), pair(pad), dilation, group),
            rng)
    return c


@case
def conv_basic():
    return conv_case("conv_basic", (2, 3, 5, 6), 4, 3)


@case
def conv_stride2_pad1():
    return conv_case("conv_stride2_pad1", (2, 3, 7, 6), 4, 3, stride=2, pad=1)


@case
def conv_dilation2():
    return conv_case("conv_dilation2", (2, 2, 7, 7), 3, 3, pad=2, dilation=2)


@case
def conv_group2():
    return conv_case("conv_group2", (2, 4, 5, 5), 6, 3, pad=1, group=2)


@case
def conv_nobias():
    return conv_case("conv_nobias", (2, 3, 4, 5), 2, 2, bias=False)


@case
def conv_1x1():
    return conv_case("conv_1x1", (2, 5, 3, 4), 3, 1)


@case
def conv_rect_kernel():
    return conv_case("conv_rect_kernel", (1, 2, 6, 5), 3, (3, 2), stride=1, pad=1)


@case
def conv_asymmetric():
    return conv_case("conv_asymmetric", (2, 2, 6, 7), 2, (2, 3), stride=(1, 2), pad=(1, 0))
