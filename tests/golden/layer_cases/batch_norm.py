"""Golden cases of BatchNorm (layers/batch_norm.cpp)."""

import torch.nn.functional as F

from layer_cases.common import REDUCTION, rng_for, f32, Case, compute, case


def bn_case(name, shape, phase, maf=0.9, eps=None, global_stats=None):
    rng = rng_for(name)
    opts = ["moving_average_fraction: %g" % maf]
    if eps is not None:
        opts.append("eps: %g" % eps)
    if global_stats is not None:
        opts.append("use_global_stats: %s" % ("true" if global_stats else "false"))
    ch = shape[1]
    c = Case(name, "BatchNorm", "batch_norm_param { %s }" % " ".join(opts), phase=phase, tol=REDUCTION)
    training = not (global_stats if global_stats is not None else phase == "TEST")
    c.desc = "BatchNorm %s %s, %s statistics, maf %g (torch momentum %g)" % (
        list(shape), phase, "batch" if training else "running", maf, 1 - maf)
    x = rng.standard_normal(shape) * 1.5 + rng.standard_normal((1, ch) + (1,) * (len(shape) - 2)) * 3
    c.inputs = [f32(x)]
    c.grad_inputs = [0]
    c.params["running_mean"] = f32(rng.standard_normal(ch))
    c.params["running_var"] = f32(rng.uniform(0.5, 2.0, ch))
    e = 1e-5 if eps is None else eps

    def fn(x, p):
        # Updates the running buffers in place in TRAIN; compute() stores them as *_after.
        return F.batch_norm(x[0], p["running_mean"], p["running_var"], training=training, momentum=1 - maf, eps=e)

    compute(c, fn, rng)
    return c


@case
def batch_norm_train_2d():
    return bn_case("batch_norm_train_2d", (6, 3), "TRAIN")


@case
def batch_norm_train_4d():
    return bn_case("batch_norm_train_4d", (3, 2, 3, 2), "TRAIN", maf=0.8, eps=1e-3)


@case
def batch_norm_test():
    return bn_case("batch_norm_test", (2, 3, 2, 2), "TEST", global_stats=True)


@case
def batch_norm_test_default():
    return bn_case("batch_norm_test_default", (3, 4), "TEST")
