"""Golden cases of EuclideanLoss (layers/euclidean_loss.cpp): sum((a - b)^2) / (2 N), Caffe's definition."""

from layer_cases.common import REDUCTION, rng_for, f32, Case, compute, case


def euclidean_case(name, shape_a, shape_b, loss_weight=1.0, desc=""):
    rng = rng_for(name)
    c = Case(name, "EuclideanLoss", "", tol=REDUCTION, desc=desc)
    c.inputs = [f32(rng.standard_normal(shape_a)), f32(rng.standard_normal(shape_b))]
    c.grad_inputs = [0, 1]
    c.loss_weight = loss_weight
    n = shape_a[0]

    def fn(x, p):
        d = x[0].reshape(n, -1) - x[1].reshape(n, -1)
        return (d * d).sum() / (2.0 * n)

    compute(c, fn, rng)
    return c


@case
def euclidean_plain():
    return euclidean_case("euclidean_plain", (4, 3), (4, 3),
                          desc="EuclideanLoss = sum((a - b)^2) / (2 N); both bottoms take a gradient")


@case
def euclidean_reshaped():
    return euclidean_case("euclidean_reshaped", (3, 2, 2), (3, 4), loss_weight=2.0,
                          desc="bottoms [3, 2, 2] and [3, 4] (same count per sample), loss_weight 2")
