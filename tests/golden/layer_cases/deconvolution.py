"""Golden cases of Deconvolution (layers/deconvolution.cpp): torch's
conv_transpose2d, whose weight layout [in, out / groups, kh, kw] and output
size stride * (H - 1) + dilation * (k - 1) + 1 - 2 * pad are Caffe's."""

import torch.nn.functional as F

from layer_cases.common import REDUCTION, rng_for, f32, Case, compute, case, pair, hw_opt


def deconv_case(name, shape, cout, k, stride=1, pad=0, dilation=1, group=1, bias=True):
    rng = rng_for(name)
    kh, kw = pair(k)
    c = Case(name, "Deconvolution", "", tol=REDUCTION)
    ksz = "kernel_size: %d" % kh if kh == kw else "kernel_h: %d kernel_w: %d" % (kh, kw)
    opts = ["num_output: %d" % cout, ksz] + hw_opt("stride", stride, 1) + hw_opt("pad", pad, 0)
    if dilation != 1:
        opts.append("dilation: %d" % dilation)
    if group != 1:
        opts.append("group: %d" % group)
    if not bias:
        opts.append("bias_term: false")
    c.config = "convolution_param { %s }" % " ".join(opts)
    c.desc = "Deconvolution %s -> %d, kernel %dx%d stride %s pad %s dilation %d group %d%s" % (
        list(shape), cout, kh, kw, pair(stride), pair(pad), dilation, group, "" if bias else ", no bias")
    c.inputs = [f32(rng.standard_normal(shape))]
    c.grad_inputs = [0]
    c.params["weight"] = f32(rng.standard_normal((shape[1], cout // group, kh, kw)) * 0.5)
    c.learnable = ["weight"]
    if bias:
        c.params["bias"] = f32(rng.standard_normal(cout))
        c.learnable.append("bias")
    compute(c, lambda x, p: F.conv_transpose2d(x[0], p["weight"], p.get("bias"), pair(stride), pair(pad), 0, group,
                                               dilation), rng)
    return c


@case
def deconv_basic():
    return deconv_case("deconv_basic", (2, 3, 4, 3), 2, 3)


@case
def deconv_upsample2():
    return deconv_case("deconv_upsample2", (2, 2, 3, 4), 3, 4, stride=2, pad=1)


@case
def deconv_group_dilation():
    return deconv_case("deconv_group_dilation", (1, 4, 3, 3), 6, 3, stride=2, pad=1, dilation=2, group=2)


@case
def deconv_rect_nobias():
    return deconv_case("deconv_rect_nobias", (2, 2, 3, 2), 2, (2, 3), stride=(3, 1), pad=(0, 1), bias=False)


@case
def deconv_fcn_like():
    return deconv_case("deconv_fcn_like", (1, 2, 2, 2), 2, 8, stride=4, bias=False)
