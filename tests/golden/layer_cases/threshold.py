"""Golden cases of Threshold (layers/threshold.cpp): 1 where x > threshold, else 0. No gradient."""

from layer_cases.common import EXACT, rng_for, f32, Case, compute, case


def threshold_case(name, threshold, config):
    rng = rng_for(name)
    c = Case(name, "Threshold", config, tol=EXACT,
             desc="Threshold %g, with inputs exactly at the threshold (which give 0); forward only" % threshold)
    x = rng.standard_normal((3, 4, 2))
    x.reshape(-1)[:3] = threshold  # not above: 0
    c.inputs = [f32(x)]
    c.backward = False
    compute(c, lambda xs, p: (xs[0] > threshold).double(), rng)
    return c


@case
def threshold_zero():
    return threshold_case("threshold_zero", 0.0, "")


@case
def threshold_half():
    return threshold_case("threshold_half", 0.5, "threshold_param { threshold: 0.5 }")
