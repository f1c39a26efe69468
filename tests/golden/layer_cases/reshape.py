"""Golden cases of Reshape (layers/reshape.cpp)."""

from layer_cases.common import case, shape_case


@case
def reshape():
    return shape_case("reshape", "Reshape", "reshape_param { shape { dim: 0 dim: -1 dim: 2 } }",
                      [(2, 3, 2, 2)], lambda x: x[0].reshape(2, -1, 2), desc="Reshape 0 / -1 dims")
