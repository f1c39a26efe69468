"""Golden cases of Power (layers/power.cpp): y = (shift + scale * x)^power, torch.pow."""

import numpy as np
import torch

from layer_cases.common import ELEMENTWISE, rng_for, f32, Case, compute, case, act_case


@case
def power_default():
    return act_case("power_default", "Power", "", lambda x: torch.pow(x, 1.0),
                    desc="Power with defaults (power 1, scale 1, shift 0): the identity")


@case
def power_square():
    return act_case("power_square", "Power", "power_param { power: 2 scale: 0.5 shift: 1 }",
                    lambda x: torch.pow(1.0 + 0.5 * x, 2.0), desc="(1 + 0.5 x)^2")


@case
def power_cube():
    return act_case("power_cube", "Power", "power_param { power: 3 scale: -1.5 shift: 0.2 }",
                    lambda x: torch.pow(0.2 - 1.5 * x, 3.0), desc="(0.2 - 1.5 x)^3: a negative scale, odd power")


@case
def power_sqrt():
    name = "power_sqrt"
    rng = rng_for(name)
    c = Case(name, "Power", "power_param { power: 0.5 scale: 2 shift: 0.5 }", tol=ELEMENTWISE,
             desc="(0.5 + 2 x)^0.5 on positive inputs (a fractional power)")
    c.inputs = [f32(rng.uniform(0.05, 3.0, size=(2, 3, 4)))]
    c.grad_inputs = [0]
    compute(c, lambda x, p: torch.pow(0.5 + 2.0 * x[0], 0.5), rng)
    return c
