"""Golden cases of AdaptivePooling (layers/adaptive_pooling.cpp)."""

import torch.nn.functional as F

from layer_cases.common import ELEMENTWISE, rng_for, f32, Case, compute, case


def adaptive_pool_case(name, shape, out_hw, mode, square=False):
    rng = rng_for(name)
    size = "output_size: %d" % out_hw[0] if square else "output_h: %d output_w: %d" % out_hw
    c = Case(name, "AdaptivePooling", "adaptive_pooling_param { %s pool: %s }" % (size, mode), tol=ELEMENTWISE)
    c.desc = "AdaptivePooling %s %s -> %s (bins may overlap)" % (mode, list(shape), list(out_hw))
    c.inputs = [f32(rng.standard_normal(shape))]
    c.grad_inputs = [0]
    fn = F.adaptive_max_pool2d if mode == "MAX" else F.adaptive_avg_pool2d
    compute(c, lambda x, p: fn(x[0], out_hw), rng)
    return c


@case
def adaptive_pool_ave():
    return adaptive_pool_case("adaptive_pool_ave", (2, 3, 7, 5), (3, 2), "AVE")


@case
def adaptive_pool_max():
    return adaptive_pool_case("adaptive_pool_max", (2, 3, 5, 7), (3, 4), "MAX")


@case
def adaptive_pool_upsample():
    # More outputs than inputs: every bin is one or two inputs, reused.
    return adaptive_pool_case("adaptive_pool_upsample", (1, 2, 3, 2), (5, 5), "AVE", square=True)


@case
def adaptive_pool_vgg():
    # VGG's avgpool: 7x7 from the 7x7 feature map of a 224 image is the identity.
    return adaptive_pool_case("adaptive_pool_vgg", (1, 2, 7, 7), (7, 7), "AVE", square=True)
