"""Golden cases of TanH (layers/tanh.cpp)."""

import torch

from layer_cases.common import case, act_case


@case
def tanh():
    return act_case("tanh", "TanH", "", torch.tanh, shape=(3, 4, 2), large=True,
                    desc="TanH including |x| up to 1000")
