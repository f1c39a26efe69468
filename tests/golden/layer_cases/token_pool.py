"""Golden cases of TokenPool (layers/token_pool.cpp)."""

from layer_cases.common import ELEMENTWISE, rng_for, f32, Case, compute, case, shape_case


@case
def token_pool_class():
    return shape_case("token_pool_class", "TokenPool", "", [(2, 4, 3)], lambda x: x[0][:, 0],
                      desc="TokenPool CLASS_TOKEN (default): token 0")


@case
def token_pool_mean():
    name = "token_pool_mean"
    rng = rng_for(name)
    c = Case(name, "TokenPool", "token_pool_param { pool: MEAN }", tol=ELEMENTWISE,
             desc="TokenPool MEAN over the tokens")
    c.inputs = [f32(rng.standard_normal((2, 5, 3)))]
    c.grad_inputs = [0]
    compute(c, lambda x, p: x[0].mean(dim=1), rng)
    return c
