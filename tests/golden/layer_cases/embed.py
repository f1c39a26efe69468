"""Golden cases of Embed (layers/embed.cpp): torch's F.embedding plus the
bias; the indices take no gradient."""

import torch.nn.functional as F

from layer_cases.common import REDUCTION, rng_for, f32, Case, compute, case, labels


def embed_case(name, shape, rows, cols, bias, desc):
    rng = rng_for(name)
    opts = "num_output: %d input_dim: %d%s" % (cols, rows, "" if bias else " bias_term: false")
    c = Case(name, "Embed", "embed_param { %s }" % opts, tol=REDUCTION, desc=desc)
    c.inputs = [labels(rng, shape, rows)]
    c.grad_inputs = []
    c.params["weight"] = f32(rng.standard_normal((rows, cols)))
    c.learnable = ["weight"]
    if bias:
        c.params["bias"] = f32(rng.standard_normal(cols))
        c.learnable.append("bias")

    def fn(x, p):
        y = F.embedding(x[0].long(), p["weight"])
        return y + p["bias"] if bias else y

    compute(c, fn, rng)
    return c


@case
def embed_bias():
    return embed_case("embed_bias", (3, 4), 5, 3, True, "Embed [3, 4] indices into 5 rows of 3, with bias (rows repeat)")


@case
def embed_nobias():
    return embed_case("embed_nobias", (6,), 4, 2, False, "Embed without bias")
