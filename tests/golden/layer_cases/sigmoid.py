"""Golden cases of Sigmoid (layers/sigmoid.cpp)."""

import torch

from layer_cases.common import case, act_case


@case
def sigmoid():
    return act_case("sigmoid", "Sigmoid", "", torch.sigmoid, shape=(3, 4, 2), large=True,
                    desc="Sigmoid including |x| up to 1000")
