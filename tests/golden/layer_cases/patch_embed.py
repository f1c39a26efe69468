"""Golden cases of PatchEmbed (layers/patch_embed.cpp)."""

import torch.nn.functional as F

from layer_cases.common import REDUCTION, rng_for, f32, Case, compute, case


def patch_embed_case(name, shape, patch, dim):
    rng = rng_for(name)
    c = Case(name, "PatchEmbed", "patch_embed_param { patch_size: %d num_output: %d }" % (patch, dim), tol=REDUCTION)
    c.desc = "PatchEmbed %s, patch %d -> %d (torchvision conv_proj + flatten(2).transpose(1, 2))" % (
        list(shape), patch, dim)
    c.inputs = [f32(rng.standard_normal(shape))]
    c.grad_inputs = [0]
    c.params["weight"] = f32(rng.standard_normal((dim, shape[1], patch, patch)) * 0.5)
    c.params["bias"] = f32(rng.standard_normal(dim))
    c.learnable = ["weight", "bias"]
    compute(c, lambda x, p: F.conv2d(x[0], p["weight"], p["bias"], stride=patch).flatten(2).transpose(1, 2), rng)
    return c


@case
def patch_embed_p2():
    return patch_embed_case("patch_embed_p2", (2, 3, 4, 6), 2, 5)


@case
def patch_embed_p3():
    return patch_embed_case("patch_embed_p3", (1, 2, 6, 3), 3, 4)
