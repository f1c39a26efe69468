"""Golden cases of Slice (layers/slice.cpp): torch.split along the axis."""

import torch

from layer_cases.common import case, shape_case


@case
def slice_points():
    return shape_case("slice_points", "Slice", "slice_param { axis: 1 slice_point: 1 slice_point: 4 }",
                      [(2, 6, 3)], lambda x: list(torch.split(x[0], [1, 3, 2], 1)),
                      desc="Slice axis 1 at points 1 and 4 into three tops")


@case
def slice_equal():
    return shape_case("slice_equal", "Slice", "slice_param { axis: -1 }", [(2, 3, 4)],
                      lambda x: list(torch.split(x[0], 2, -1)), desc="Slice the last axis into two equal tops")


@case
def slice_dim0():
    return shape_case("slice_dim0", "Slice", "slice_param { slice_dim: 0 slice_point: 1 }", [(3, 2)],
                      lambda x: list(torch.split(x[0], [1, 2], 0)), desc="Slice with Caffe's legacy slice_dim 0")
