"""Golden cases of ReLU (layers/relu.cpp)."""

import torch.nn.functional as F

from layer_cases.common import case, act_case


@case
def relu():
    return act_case("relu", "ReLU", "", F.relu, desc="ReLU")


@case
def relu_negative_slope():
    return act_case("relu_negative_slope", "ReLU", "relu_param { negative_slope: 0.1 }",
                    lambda x: F.leaky_relu(x, 0.1), desc="ReLU with Caffe's negative_slope 0.1")
