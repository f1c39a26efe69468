"""Golden cases of PositionEmbedding (layers/position_embedding.cpp)."""

import torch

from layer_cases.common import ELEMENTWISE, rng_for, f32, Case, compute, case


def pos_embed_case(name, shape, class_token=True):
    rng = rng_for(name)
    cfg = "" if class_token else "position_embedding_param { class_token: false }"
    c = Case(name, "PositionEmbedding", cfg, tol=ELEMENTWISE)
    n, t, d = shape
    c.desc = "PositionEmbedding %s, %s" % (list(shape), "class token prepended" if class_token else "no class token")
    c.inputs = [f32(rng.standard_normal(shape))]
    c.grad_inputs = [0]
    if class_token:
        c.params["class_token"] = f32(rng.standard_normal((1, 1, d)))
        c.learnable.append("class_token")
    c.params["pos_embedding"] = f32(rng.standard_normal((1, t + (1 if class_token else 0), d)))
    c.learnable.append("pos_embedding")

    def fn(x, p):
        tokens = x[0]
        if class_token:  # torchvision VisionTransformer: cat([class_token, x], 1) + pos_embedding
            tokens = torch.cat([p["class_token"].expand(n, -1, -1), tokens], dim=1)
        return tokens + p["pos_embedding"]

    compute(c, fn, rng)
    return c


@case
def pos_embed_class_token():
    return pos_embed_case("pos_embed_class_token", (3, 4, 5))


@case
def pos_embed_no_class_token():
    return pos_embed_case("pos_embed_no_class_token", (2, 3, 4), class_token=False)
