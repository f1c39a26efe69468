"""Golden cases of AbsVal (layers/abs_val.cpp): torch.abs."""

import torch

from layer_cases.common import case, act_case


@case
def abs_val():
    return act_case("abs_val", "AbsVal", "", torch.abs, shape=(3, 4, 2), large=True,
                    desc="AbsVal |x|, including |x| up to 1000")
