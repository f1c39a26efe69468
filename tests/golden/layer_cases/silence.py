"""Golden case of Silence (layers/silence.cpp): no tops; every bottom's
gradient is zero (Caffe's definition; PyTorch has no such layer)."""

import numpy as np

from layer_cases.common import EXACT, rng_for, f32, Case, case


@case
def silence_two_bottoms():
    name = "silence_two_bottoms"
    rng = rng_for(name)
    c = Case(name, "Silence", "", tol=EXACT, desc="Silence of two bottoms: no tops, zero gradients")
    c.inputs = [f32(rng.standard_normal((2, 3))), f32(rng.standard_normal((2, 2, 2)))]
    c.grad_inputs = [0, 1]
    c.n_tops = 0
    for i, a in enumerate(c.inputs):
        c.files["din%d" % i] = np.zeros(a.shape, dtype=np.float32)
    return c
