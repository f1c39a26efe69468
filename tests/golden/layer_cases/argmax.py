"""Golden cases of ArgMax (layers/argmax.cpp). PyTorch's topk breaks ties
its own way, so the reference is Caffe's definition written out: each row's
(value, index) pairs sorted descending, so that equal values rank the larger
index first. The inputs hold ties on purpose. No backward."""

import numpy as np
import torch

from layer_cases.common import EXACT, rng_for, f32, Case, compute, case


def caffe_argmax(x, top_k, out_max_val, axis):
    x = np.asarray(x, dtype=np.float64)
    if axis is None:
        rows = x.reshape(x.shape[0], -1)
        out = np.zeros((x.shape[0], 2 if out_max_val else 1, top_k) + (1,) * max(0, x.ndim - 3))
        for i, r in enumerate(rows):
            ranked = sorted(((v, j) for j, v in enumerate(r)), reverse=True)[:top_k]
            out[i, 0, :] = np.array([j for _, j in ranked]).reshape(out[i, 0].shape)
            if out_max_val:
                out[i, 1, :] = np.array([v for v, _ in ranked]).reshape(out[i, 1].shape)
        return out
    moved = np.moveaxis(x, axis, -1)
    out = np.zeros(moved.shape[:-1] + (top_k,))
    for idx in np.ndindex(moved.shape[:-1]):
        ranked = sorted(((v, j) for j, v in enumerate(moved[idx])), reverse=True)[:top_k]
        out[idx] = [v if out_max_val else j for v, j in ranked]
    return np.moveaxis(out, -1, axis)


def argmax_case(name, shape, config, top_k, out_max_val, axis, desc):
    rng = rng_for(name)
    c = Case(name, "ArgMax", config, phase="TEST", tol=EXACT, desc=desc)
    c.inputs = [f32(rng.integers(-3, 4, size=shape) * 0.5)]  # few distinct values: ties
    c.backward = False
    want = caffe_argmax(c.inputs[0], top_k, out_max_val, axis)
    compute(c, lambda x, p: torch.tensor(want), rng)
    return c


@case
def argmax_item_top1():
    return argmax_case("argmax_item_top1", (3, 2, 2, 2), "", 1, False, None,
                       "ArgMax of each item's 8 values (top [N, 1, 1, 1]); ties go to the larger index")


@case
def argmax_item_top3_values():
    return argmax_case("argmax_item_top3_values", (4, 6), "argmax_param { out_max_val: true top_k: 3 }", 3, True, None,
                       "ArgMax top 3 with values: top [N, 2, 3], indices then values")


@case
def argmax_axis1_top2():
    return argmax_case("argmax_axis1_top2", (2, 5, 3), "argmax_param { axis: 1 top_k: 2 }", 2, False, 1,
                       "ArgMax top 2 along axis 1: indices")


@case
def argmax_axis_last_values():
    return argmax_case("argmax_axis_last_values", (2, 3, 4), "argmax_param { axis: -1 out_max_val: true }", 1, True, -1,
                       "ArgMax along the last axis with out_max_val: the maximum values")
