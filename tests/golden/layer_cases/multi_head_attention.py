"""Golden cases of MultiHeadAttention (layers/multi_head_attention.cpp)."""

import torch

from layer_cases.common import REDUCTION, rng_for, f32, Case, compute, case


def mha_case(name, n, t, d, heads, bias=True):
    rng = rng_for(name)
    opts = ["num_heads: %d" % heads]
    if not bias:
        opts.append("bias_term: false")
    c = Case(name, "MultiHeadAttention", "attention_param { %s }" % " ".join(opts), tol=REDUCTION)
    c.desc = "MultiHeadAttention [%d, %d, %d], %d heads%s (torch MultiheadAttention, batch_first)" % (
        n, t, d, heads, "" if bias else ", no bias")
    c.inputs = [f32(rng.standard_normal((n, t, d)))]
    c.grad_inputs = [0]
    # Weights large enough that the attention is far from uniform.
    c.params["in_proj_weight"] = f32(rng.standard_normal((3 * d, d)) * 0.6)
    c.learnable = ["in_proj_weight"]
    if bias:
        c.params["in_proj_bias"] = f32(rng.standard_normal(3 * d) * 0.5)
        c.learnable.append("in_proj_bias")
    c.params["out_proj_weight"] = f32(rng.standard_normal((d, d)) * 0.5)
    c.learnable.append("out_proj_weight")
    if bias:
        c.params["out_proj_bias"] = f32(rng.standard_normal(d) * 0.5)
        c.learnable.append("out_proj_bias")

    def fn(x, p):
        mha = torch.nn.MultiheadAttention(d, heads, bias=bias, batch_first=True)
        # Swap in our tensors so autograd reaches them; the module only routes.
        del mha.in_proj_weight, mha.out_proj.weight
        mha.in_proj_weight = p["in_proj_weight"]
        mha.out_proj.weight = p["out_proj_weight"]
        if bias:
            del mha.in_proj_bias, mha.out_proj.bias
            mha.in_proj_bias = p["in_proj_bias"]
            mha.out_proj.bias = p["out_proj_bias"]
        mha.train(False)
        out, _ = mha(x[0], x[0], x[0], need_weights=False)
        return out

    compute(c, fn, rng)
    return c


@case
def mha_heads2():
    return mha_case("mha_heads2", 2, 5, 8, 2)


@case
def mha_heads3():
    return mha_case("mha_heads3", 2, 4, 6, 3)


@case
def mha_nobias():
    return mha_case("mha_nobias", 1, 3, 4, 1, bias=False)
