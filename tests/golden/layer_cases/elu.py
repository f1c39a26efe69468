"""Golden cases of ELU (layers/elu.cpp): torch.nn.functional.elu."""

import torch.nn.functional as F

from layer_cases.common import case, act_case


@case
def elu_default():
    return act_case("elu_default", "ELU", "", F.elu, shape=(3, 4, 2), large=True,
                    desc="ELU alpha 1, including |x| up to 1000")


@case
def elu_alpha():
    return act_case("elu_alpha", "ELU", "elu_param { alpha: 0.3 }", lambda x: F.elu(x, alpha=0.3),
                    desc="ELU alpha 0.3")


@case
def elu_negative_alpha():
    return act_case("elu_negative_alpha", "ELU", "elu_param { alpha: -0.5 }", lambda x: F.elu(x, alpha=-0.5),
                    desc="ELU alpha -0.5 (backward reads the input)")
