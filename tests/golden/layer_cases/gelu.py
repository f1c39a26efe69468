"""Golden cases of GELU (layers/gelu.cpp)."""

import torch.nn.functional as F

from layer_cases.common import case, act_case


@case
def gelu_exact():
    return act_case("gelu_exact", "GELU", "", F.gelu, shape=(3, 4, 2), large=True,
                    desc="GELU exact (erf), including |x| up to 1000")


@case
def gelu_tanh():
    return act_case("gelu_tanh", "GELU", "gelu_param { approximate: TANH }",
                    lambda x: F.gelu(x, approximate="tanh"), shape=(3, 4, 2), large=True,
                    desc="GELU tanh approximation, including |x| up to 1000")
