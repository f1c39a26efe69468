"""Golden cases of Accuracy (layers/accuracy.cpp)."""

import numpy as np
import torch

from layer_cases.common import EXACT, rng_for, f32, Case, compute, case, labels


def acc_case(name, shape, label_shape, top_k=1, ignore=None, per_class=False):
    rng = rng_for(name)
    opts = []
    if top_k != 1:
        opts.append("top_k: %d" % top_k)
    if ignore is not None:
        opts.append("ignore_label: %d" % ignore)
    cfg = "accuracy_param { %s }" % " ".join(opts) if opts else ""
    c = Case(name, "Accuracy", cfg, phase="TEST", tol=EXACT,
             desc="Accuracy top %d%s%s" % (top_k, "" if ignore is None else ", ignore_label %d" % ignore,
                                          ", per-class top" if per_class else ""))
    ch = shape[1]
    lab = labels(rng, label_shape, ch)
    if ignore is not None:
        lab.reshape(-1)[::4] = ignore
    c.inputs = [f32(rng.standard_normal(shape)), lab]
    c.backward = False

    def fn(x, p):
        n = shape[0]
        inner = int(np.prod(shape[2:])) if len(shape) > 2 else 1
        s = x[0].reshape(n, ch, inner).permute(0, 2, 1).reshape(-1, ch)
        t = torch.tensor(lab.reshape(-1).astype(np.int64))
        keep = t != (-1 if ignore is None else ignore)
        s, t = s[keep], t[keep]
        hit = (s.topk(top_k, dim=1).indices == t[:, None]).any(dim=1).double()
        outs = [hit.mean()]
        if per_class:
            pc = torch.zeros(ch)
            for k in range(ch):
                m = t == k
                pc[k] = hit[m].mean() if m.any() else 0.0
            outs.append(pc)
        return outs

    compute(c, fn, rng)
    return c


@case
def accuracy_top1():
    return acc_case("accuracy_top1", (8, 5), (8,))


@case
def accuracy_top3():
    return acc_case("accuracy_top3", (8, 6), (8,), top_k=3)


@case
def accuracy_spatial_ignore():
    return acc_case("accuracy_spatial_ignore", (2, 4, 3), (2, 3), top_k=2, ignore=1)


@case
def accuracy_per_class():
    return acc_case("accuracy_per_class", (10, 4), (10,), per_class=True)
