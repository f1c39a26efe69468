"""Golden cases of MultinomialLogisticLoss (layers/multinomial_logistic_loss.cpp):
torch nll_loss of log(p) on probabilities p, mean over N (Caffe's definition)."""

import numpy as np
import torch
import torch.nn.functional as F

from layer_cases.common import REDUCTION, rng_for, f32, Case, compute, case, labels


def mll_case(name, shape, label_shape, loss_weight=1.0, desc=""):
    rng = rng_for(name)
    c = Case(name, "MultinomialLogisticLoss", "", tol=REDUCTION, desc=desc)
    n = shape[0]
    dim = int(np.prod(shape[1:]))
    z = rng.standard_normal((n, dim))
    prob = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    lab = labels(rng, label_shape, dim)
    c.inputs = [f32(prob.reshape(shape)), lab]
    c.grad_inputs = [0]
    c.loss_weight = loss_weight
    target = torch.tensor(lab.reshape(-1).astype(np.int64))

    def fn(x, p):
        return F.nll_loss(torch.log(x[0].reshape(n, dim)), target, reduction="sum") / n

    compute(c, fn, rng)
    return c


@case
def mll_plain():
    return mll_case("mll_plain", (4, 5), (4,), desc="MultinomialLogisticLoss on softmax probabilities [N, C]")


@case
def mll_caffe_layout():
    return mll_case("mll_caffe_layout", (3, 4, 1, 1), (3, 1, 1, 1), loss_weight=0.5,
                    desc="Caffe's [N, C, 1, 1] probabilities and [N, 1, 1, 1] labels, loss_weight 0.5")
