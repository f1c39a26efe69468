"""Golden cases of Pooling (layers/pooling.cpp)."""

import numpy as np
import torch.nn.functional as F

from layer_cases.common import rng_for, f32, Case, compute, case, pair, hw_opt


# Caffe pooling, written out in float64 to cross-check torch's pooling (whose
# ceil_mode / count_include_pad must reproduce Caffe's window rules).


def caffe_pool_out(size, k, s, p, ceil_mode):
    if ceil_mode:
        n = -(-(size + 2 * p - k) // s) + 1
    else:
        n = (size + 2 * p - k) // s + 1
    if p > 0 and (n - 1) * s >= size + p:
        n -= 1  # the last window must start inside the image or its left pad
    return n


def caffe_pool(x, k, s, p, ceil_mode, mode):
    N, C, H, W = x.shape
    oh, ow = caffe_pool_out(H, k[0], s[0], p[0], ceil_mode), caffe_pool_out(W, k[1], s[1], p[1], ceil_mode)
    y = np.zeros((N, C, oh, ow))
    for i in range(oh):
        for j in range(ow):
            hs, ws = i * s[0] - p[0], j * s[1] - p[1]
            he, we = min(hs + k[0], H + p[0]), min(ws + k[1], W + p[1])
            area = (he - hs) * (we - ws)  # AVE divides by the window clipped to the padded input
            hs, ws, he, we = max(hs, 0), max(ws, 0), min(he, H), min(we, W)
            win = x[:, :, hs:he, ws:we]
            y[:, :, i, j] = win.max(axis=(2, 3)) if mode == "MAX" else win.sum(axis=(2, 3)) / area
    return y


def pool_case(name, shape, mode, k=3, stride=2, pad=0, round_mode=None, global_pool=False):
    rng = rng_for(name)
    ceil = round_mode != "FLOOR"  # Caffe's default is CEIL
    opts = ["pool: %s" % mode]
    if global_pool:
        opts.append("global_pooling: true")
        k, stride, pad = (shape[2], shape[3]), (1, 1), (0, 0)
    else:
        kh, kw = pair(k)
        opts.append("kernel_size: %d" % kh if kh == kw else "kernel_h: %d kernel_w: %d" % (kh, kw))
        opts += hw_opt("stride", stride, 1) + hw_opt("pad", pad, 0)
        k, stride, pad = pair(k), pair(stride), pair(pad)
    if round_mode:
        opts.append("round_mode: %s" % round_mode)
    c = Case(name, "Pooling", "pooling_param { %s }" % " ".join(opts))
    c.desc = "Pooling %s %s kernel %s stride %s pad %s %s%s" % (
        mode, list(shape), k, stride, pad, "CEIL" if ceil else "FLOOR", " global" if global_pool else "")
    c.inputs = [f32(rng.standard_normal(shape))]
    c.grad_inputs = [0]

    def fn(x, p):
        if mode == "MAX":
            return F.max_pool2d(x[0], k, stride, pad, ceil_mode=ceil)
        return F.avg_pool2d(x[0], k, stride, pad, ceil_mode=ceil, count_include_pad=True)

    compute(c, fn, rng)
    ref = caffe_pool(c.inputs[0].astype(np.float64), k, stride, pad, ceil, mode)
    got = c.files["out0"].astype(np.float64)
    assert ref.shape == got.shape, (name, ref.shape, got.shape)
    assert np.allclose(ref, got, rtol=1e-6, atol=1e-7), (name, np.abs(ref - got).max())
    return c


@case
def pool_max_ceil():
    return pool_case("pool_max_ceil", (2, 3, 6, 7), "MAX")


@case
def pool_max_floor():
    return pool_case("pool_max_floor", (2, 3, 6, 7), "MAX", round_mode="FLOOR")


@case
def pool_ave_ceil():
    return pool_case("pool_ave_ceil", (2, 3, 6, 7), "AVE")


@case
def pool_ave_floor():
    return pool_case("pool_ave_floor", (2, 3, 6, 7), "AVE", round_mode="FLOOR")


@case
def pool_max_pad():
    return pool_case("pool_max_pad", (2, 2, 6, 5), "MAX", pad=1)


@case
def pool_ave_pad_ceil():
    # Last window covers one image row plus one pad row: the divisor counts the pad.
    return pool_case("pool_ave_pad_ceil", (2, 2, 6, 5), "AVE", pad=1)


@case
def pool_ave_pad_floor():
    return pool_case("pool_ave_pad_floor", (2, 2, 6, 5), "AVE", pad=1, round_mode="FLOOR")


@case
def pool_max_k2s2():
    return pool_case("pool_max_k2s2", (2, 3, 5, 4), "MAX", k=2, stride=2)


@case
def pool_max_rect():
    return pool_case("pool_max_rect", (2, 2, 7, 6), "MAX", k=(3, 2), stride=(2, 1), pad=(1, 0))


@case
def pool_ave_rect():
    return pool_case("pool_ave_rect", (2, 2, 7, 6), "AVE", k=(2, 3), stride=(1, 2), pad=(0, 1))


@case
def pool_global_max():
    return pool_case("pool_global_max", (2, 3, 4, 5), "MAX", global_pool=True)


@case
def pool_global_ave():
    return pool_case("pool_global_ave", (2, 3, 4, 5), "AVE", global_pool=True)
