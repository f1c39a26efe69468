"""Golden cases of Tile (layers/tile.cpp): torch's repeat on one axis
(Caffe tiles the block of the axis and everything after it)."""

from layer_cases.common import EXACT, ELEMENTWISE, rng_for, f32, Case, compute, case


def tile_case(name, shape, axis, tiles, desc):
    rng = rng_for(name)
    # Backward sums `tiles` gradients: exact only for one copy.
    c = Case(name, "Tile", "tile_param { axis: %d tiles: %d }" % (axis, tiles), tol=ELEMENTWISE, desc=desc)
    c.inputs = [f32(rng.standard_normal(shape))]
    c.grad_inputs = [0]
    reps = [1] * len(shape)
    reps[axis] = tiles
    compute(c, lambda x, p: x[0].repeat(*reps), rng)
    return c


@case
def tile_axis1():
    return tile_case("tile_axis1", (2, 3, 2), 1, 3, "Tile axis 1 three times")


@case
def tile_last_axis():
    return tile_case("tile_last_axis", (2, 2, 3), -1, 2, "Tile the last axis twice")
