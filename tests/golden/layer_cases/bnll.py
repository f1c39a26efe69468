"""Golden cases of BNLL (layers/bnll.cpp): log(1 + exp(x)) = torch softplus."""

import torch.nn.functional as F

from layer_cases.common import case, act_case


@case
def bnll():
    # softplus returns x above its threshold 20, where log1p(exp(-x)) < 2e-9:
    # the same value in float32.
    return act_case("bnll", "BNLL", "", F.softplus, shape=(3, 4, 2), large=True,
                    desc="BNLL = softplus, including |x| up to 1000")
