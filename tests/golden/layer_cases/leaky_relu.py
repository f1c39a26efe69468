"""Golden cases of LeakyReLU (layers/leaky_relu.cpp)."""

import torch.nn.functional as F

from layer_cases.common import case, act_case


@case
def leaky_relu_default():
    return act_case("leaky_relu_default", "LeakyReLU", "", lambda x: F.leaky_relu(x, 0.01),
                    desc="LeakyReLU default slope 0.01 (torch default)")


@case
def leaky_relu_slope():
    return act_case("leaky_relu_slope", "LeakyReLU", "leaky_relu_param { negative_slope: 0.3 }",
                    lambda x: F.leaky_relu(x, 0.3), desc="LeakyReLU slope 0.3")
