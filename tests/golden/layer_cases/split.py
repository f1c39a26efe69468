"""Golden cases of Split (layers/split.cpp)."""

from layer_cases.common import case, shape_case


@case
def split_two_tops():
    return shape_case("split_two_tops", "Split", "", [(2, 3, 2)], lambda x: [x[0] * 1.0, x[0] * 1.0],
                      desc="Split one bottom into two tops; backward sums their gradients (one rounding: exact)")
