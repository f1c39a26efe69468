"""Golden cases of Dropout (layers/dropout.cpp)."""

from layer_cases.common import ELEMENTWISE, EXACT, rng_for, f32, Case, compute, case


@case
def dropout_test():
    name = "dropout_test"
    rng = rng_for(name)
    c = Case(name, "Dropout", "dropout_param { dropout_ratio: 0.3 }", phase="TEST", tol=EXACT,
             desc="Dropout at TEST is the identity (no scaling: inverted dropout)")
    c.inputs = [f32(rng.standard_normal((2, 3, 4)))]
    c.grad_inputs = [0]
    compute(c, lambda x, p: x[0] * 1.0, rng)
    return c


@case
def dropout_train_stats():
    # Our RNG draws the mask, so values cannot be golden; the test checks that
    # every output is 0 or x / (1 - ratio), that the kept fraction is within
    # 5 sigma of 1 - ratio, and that backward uses the same mask and scale.
    name = "dropout_train_stats"
    rng = rng_for(name)
    c = Case(name, "Dropout", "dropout_param { dropout_ratio: 0.3 }", phase="TRAIN", tol=ELEMENTWISE,
             desc="Dropout TRAIN: statistics only (mask from our RNG)")
    c.inputs = [f32(rng.uniform(0.5, 2.0, (4, 10, 100)))]  # nonzero, so a dropped value is recognisable
    c.files["dout0"] = f32(rng.standard_normal((4, 10, 100)))
    c.extra_meta["mode"] = "dropout_stats"
    c.extra_meta["dropout_ratio"] = "0.3"
    return c
