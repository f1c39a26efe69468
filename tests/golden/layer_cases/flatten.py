"""Golden cases of Flatten (layers/flatten.cpp)."""

from layer_cases.common import case, shape_case


@case
def flatten():
    return shape_case("flatten", "Flatten", "", [(2, 3, 2, 2)], lambda x: x[0].flatten(1),
                      desc="Flatten axis 1 (default)")


@case
def flatten_axis_range():
    return shape_case("flatten_axis_range", "Flatten", "flatten_param { axis: 1 end_axis: 2 }",
                      [(2, 3, 2, 2)], lambda x: x[0].flatten(1, 2), desc="Flatten axes 1..2")
