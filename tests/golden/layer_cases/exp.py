"""Golden cases of Exp (layers/exp.cpp): base^(shift + scale * x)."""

import torch

from layer_cases.common import case, act_case


@case
def exp_default():
    return act_case("exp_default", "Exp", "", torch.exp, desc="Exp with defaults: e^x")


@case
def exp_base2():
    return act_case("exp_base2", "Exp", "exp_param { base: 2 scale: 0.5 shift: 1 }",
                    lambda x: torch.pow(2.0, 1.0 + 0.5 * x), desc="2^(1 + 0.5 x)")


@case
def exp_negative_scale():
    return act_case("exp_negative_scale", "Exp", "exp_param { base: -1 scale: -1.5 shift: -0.5 }",
                    lambda x: torch.exp(-0.5 - 1.5 * x), desc="e^(-0.5 - 1.5 x), base -1 spelled out")
