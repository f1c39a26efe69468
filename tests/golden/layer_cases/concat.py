"""Golden cases of Concat (layers/concat.cpp)."""

import torch

from layer_cases.common import case, shape_case


@case
def concat_axis1():
    return shape_case("concat_axis1", "Concat", "", [(2, 2, 3), (2, 3, 3), (2, 1, 3)],
                      lambda x: torch.cat(x, 1), desc="Concat three bottoms on axis 1 (default)")


@case
def concat_axis0():
    return shape_case("concat_axis0", "Concat", "concat_param { axis: 0 }", [(1, 3, 2), (2, 3, 2)],
                      lambda x: torch.cat(x, 0), desc="Concat on axis 0")
