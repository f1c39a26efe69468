#!/usr/bin/python3
"""Writes the optimizer golden data under tests/golden/solver/.

One fixed tiny problem: a linear model 4 -> 3 (weight [3, 4], bias [3], as
torch.nn.Linear and strata's InnerProduct store them) trained with
cross-entropy (mean over the batch) on one fixed batch of 8 samples. For
each case the parameters after each of the first 5 updates are computed
with PyTorch's own optimizers in float64 (the independent oracle) and stored
as float32:

  x.npy [8, 4], labels.npy [8] (class indices as float32), w0.npy [3, 4], b0.npy [3]
  <case>_weight.npy [5, 3, 4], <case>_bias.npy [5, 3], <case>_lr.npy [5]

tests/solver_golden_test.cpp builds Input + InnerProduct + SoftmaxWithLoss,
sets the same solver settings (keep CASES below and the test in step) and
compares.

Cases and what they pin down:
  sgd             torch.optim.SGD(momentum=0.9, weight_decay=0.01), constant lr
  nesterov        the same with nesterov=True. Caffe's Nesterov update
                  (1+m) v' - m v with v = m v + lr g equals torch's
                  g + m buf exactly while lr is constant.
  sgd_clip        sgd with clip_grad_norm_(0.05) before each step
  adam_step       torch.optim.Adam(weight_decay=0.01), lr_policy step
                  (stepsize 2, gamma 0.5) applied through LambdaLR
  adamw_cosine    torch.optim.AdamW(weight_decay=0.1), cosine to min_lr 0.001
                  over max_iter 10 with a linear warm-up of 3 iterations from
                  0.25 * lr
  sgd_step_caffe  Caffe's SGD with lr_policy step: the velocity keeps lr inside
                  (v = m v + lr (g + wd w); w -= v). torch.optim.SGD differs as
                  soon as lr changes (its buffer holds gradients, lr multiplies
                  the whole buffer), so this case is computed by hand from
                  autograd gradients, following Caffe's SGDSolver.

  adagrad         Caffe's AdaGradSolver (delta 1e-6, weight_decay 0.01):
                  h += g^2; w -= lr g / (sqrt(h) + delta)
  rmsprop_step    Caffe's RMSPropSolver (rms_decay 0.9, delta 1e-6) with
                  lr_policy step: h = d h + (1-d) g^2; w -= lr g / (sqrt(h) + delta)
  adadelta        Caffe's AdaDeltaSolver (momentum 0.95, delta 1e-6, base_lr 1,
                  as Caffe's mnist_autoencoder_solver_adadelta):
                  h = m h + (1-m) g^2; u = g sqrt((hu + delta) / (h + delta));
                  hu = m hu + (1-m) u^2; w -= lr u
                  These three are computed by hand from Caffe's formulas
                  (sgd_solvers.cpp; g includes weight_decay * w, as Caffe's
                  Regularize adds it first). torch.optim.Adagrad, RMSprop and
                  Adadelta differ in their defaults and argument names (eps
                  1e-10, alpha, rho; Caffe's AdaDelta takes its decay from
                  `momentum`), and newer torch versions changed details of
                  their arithmetic, so they are not the reference;
                  check_adaptive_against_torch() shows that this torch,
                  given Caffe's settings, agrees with the formulas.

Run from anywhere:  /usr/bin/python3 tests/golden/make_solver_golden.py
Deterministic: regenerating rewrites identical bytes.
"""

import math
import os

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "solver")
STEPS = 5

torch.set_default_dtype(torch.float64)


def lr_at(case, it):
    """Caffe's lr_policy formulas, plus linear warm-up (see framework/solver/lr_policy.h)."""
    base = case["base_lr"]
    policy = case.get("lr_policy", "fixed")
    if policy == "fixed":
        lr = base
    elif policy == "step":
        lr = base * case["gamma"] ** (it // case["stepsize"])
    elif policy == "cosine":
        lo, n = case["min_lr"], case["max_iter"]
        lr = lo + (base - lo) * (1 + math.cos(math.pi * it / n)) / 2
    else:
        raise ValueError(policy)
    warm = case.get("warmup_iter", 0)
    if it < warm:
        f0 = case["warmup_start_factor"]
        lr *= f0 + (1 - f0) * it / warm
    return lr


CASES = {
    "sgd": dict(opt="sgd", base_lr=0.1, momentum=0.9, weight_decay=0.01),
    "nesterov": dict(opt="sgd", nesterov=True, base_lr=0.1, momentum=0.9, weight_decay=0.01),
    "sgd_clip": dict(opt="sgd", base_lr=0.1, momentum=0.9, weight_decay=0.01, clip=0.05),
    "adam_step": dict(opt="adam", base_lr=0.01, momentum=0.9, momentum2=0.999, delta=1e-8,
                      weight_decay=0.01, lr_policy="step", gamma=0.5, stepsize=2),
    "adamw_cosine": dict(opt="adamw", base_lr=0.01, momentum=0.9, momentum2=0.999, delta=1e-8,
                         weight_decay=0.1, lr_policy="cosine", min_lr=0.001, max_iter=10,
                         warmup_iter=3, warmup_start_factor=0.25),
    "sgd_step_caffe": dict(opt="caffe_sgd", base_lr=0.1, momentum=0.9, weight_decay=0.01,
                           lr_policy="step", gamma=0.5, stepsize=2),
    "adagrad": dict(opt="caffe_adagrad", base_lr=0.1, delta=1e-6, weight_decay=0.01),
    "rmsprop_step": dict(opt="caffe_rmsprop", base_lr=0.01, rms_decay=0.9, delta=1e-6, weight_decay=0.01,
                         lr_policy="step", gamma=0.5, stepsize=2),
    "adadelta": dict(opt="caffe_adadelta", base_lr=1.0, momentum=0.95, delta=1e-6, weight_decay=0.01),
}


def caffe_update(case, p, hist, lr):
    """One update of parameter p (its .grad set) by Caffe's solver `case`,
    in place; `hist` is the list of history tensors for p."""
    kind = case["opt"]
    g = p.grad + case["weight_decay"] * p  # SGDSolver::Regularize (L2)
    delta = case.get("delta", 0.0)
    if kind == "caffe_sgd":
        hist[0].mul_(case["momentum"]).add_(lr * g)
        p.sub_(hist[0])
    elif kind == "caffe_adagrad":
        hist[0].add_(g * g)
        p.sub_(lr * g / (hist[0].sqrt() + delta))
    elif kind == "caffe_rmsprop":
        d = case["rms_decay"]
        hist[0].mul_(d).add_((1 - d) * g * g)
        p.sub_(lr * g / (hist[0].sqrt() + delta))
    elif kind == "caffe_adadelta":
        m = case["momentum"]
        hist[0].mul_(m).add_((1 - m) * g * g)
        u = g * ((hist[1] + delta) / (hist[0] + delta)).sqrt()
        hist[1].mul_(m).add_((1 - m) * u * u)
        p.sub_(lr * u)
    else:
        raise ValueError(kind)


def problem():
    rng = np.random.default_rng(20240611)
    x = rng.standard_normal((8, 4)).astype(np.float32)
    labels = np.array([0, 1, 2, 1, 0, 2, 2, 1], dtype=np.float32)
    w0 = (0.5 * rng.standard_normal((3, 4))).astype(np.float32)
    b0 = (0.1 * rng.standard_normal(3)).astype(np.float32)
    return x, labels, w0, b0


def loss_of(w, b, x, y):
    return F.cross_entropy(x @ w.t() + b, y)


def run(case, x, labels, w0, b0):
    x = torch.tensor(x, dtype=torch.float64)
    y = torch.tensor(labels, dtype=torch.int64)
    w = torch.tensor(w0, dtype=torch.float64, requires_grad=True)
    b = torch.tensor(b0, dtype=torch.float64, requires_grad=True)
    params = [w, b]
    base = case["base_lr"]
    kind = case["opt"]
    if kind == "sgd":
        opt = torch.optim.SGD(params, lr=base, momentum=case["momentum"],
                              weight_decay=case["weight_decay"], nesterov=case.get("nesterov", False))
    elif kind == "adam":
        opt = torch.optim.Adam(params, lr=base, betas=(case["momentum"], case["momentum2"]),
                               eps=case["delta"], weight_decay=case["weight_decay"])
    elif kind == "adamw":
        opt = torch.optim.AdamW(params, lr=base, betas=(case["momentum"], case["momentum2"]),
                                eps=case["delta"], weight_decay=case["weight_decay"])
    else:
        opt = None
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda it: lr_at(case, it) / base) if opt else None
    history = [[torch.zeros_like(p), torch.zeros_like(p)] for p in params]

    ws, bs, lrs = [], [], []
    for it in range(STEPS):
        for p in params:
            p.grad = None
        loss_of(w, b, x, y).backward()
        if "clip" in case:
            torch.nn.utils.clip_grad_norm_(params, case["clip"])
        lr = lr_at(case, it)
        if opt:
            assert abs(opt.param_groups[0]["lr"] - lr) <= 1e-15 * lr
            opt.step()
            sched.step()
        else:  # Caffe's solvers' ComputeUpdateValue, by hand
            with torch.no_grad():
                for p, h in zip(params, history):
                    caffe_update(case, p, h, lr)
        lrs.append(lr)
        ws.append(w.detach().numpy().copy())
        bs.append(b.detach().numpy().copy())
    return np.array(ws, np.float32), np.array(bs, np.float32), np.array(lrs, np.float64)


def check_cosine_against_torch():
    """Our closed-form cosine (no warm-up) equals torch's CosineAnnealingLR."""
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=0.01)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10, eta_min=0.001)
    case = dict(base_lr=0.01, lr_policy="cosine", min_lr=0.001, max_iter=10)
    for it in range(10):
        assert abs(opt.param_groups[0]["lr"] - lr_at(case, it)) < 1e-12, it
        opt.step()
        sched.step()


def check_caffe_sgd_differs_from_torch(x, labels, w0, b0):
    """Documents why sgd_step_caffe is computed by hand: torch.optim.SGD on the
    same step schedule agrees while lr is unchanged and differs afterwards."""
    case = dict(CASES["sgd_step_caffe"], opt="sgd")
    torch_ws, _, _ = run(case, x, labels, w0, b0)
    caffe_ws, _, _ = run(CASES["sgd_step_caffe"], x, labels, w0, b0)
    assert np.allclose(torch_ws[:2], caffe_ws[:2], rtol=1e-6, atol=1e-7)
    assert np.abs(torch_ws[2:] - caffe_ws[2:]).max() > 1e-3


def check_adaptive_against_torch(x, labels, w0, b0):
    """This torch's Adagrad, RMSprop and Adadelta, given Caffe's settings,
    agree with the formulas above (float64, to rounding)."""
    for name, make in [
        ("adagrad", lambda ps, c: torch.optim.Adagrad(ps, lr=c["base_lr"], eps=c["delta"],
                                                      weight_decay=c["weight_decay"])),
        ("rmsprop_step", lambda ps, c: torch.optim.RMSprop(ps, lr=c["base_lr"], alpha=c["rms_decay"],
                                                           eps=c["delta"], weight_decay=c["weight_decay"])),
        ("adadelta", lambda ps, c: torch.optim.Adadelta(ps, lr=c["base_lr"], rho=c["momentum"], eps=c["delta"],
                                                        weight_decay=c["weight_decay"])),
    ]:
        case = CASES[name]
        xs = torch.tensor(x, dtype=torch.float64)
        y = torch.tensor(labels, dtype=torch.int64)
        w = torch.tensor(w0, dtype=torch.float64, requires_grad=True)
        b = torch.tensor(b0, dtype=torch.float64, requires_grad=True)
        opt = make([w, b], case)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda it: lr_at(case, it) / case["base_lr"])
        ours, _, _ = run(case, x, labels, w0, b0)
        for it in range(STEPS):
            w.grad = b.grad = None
            loss_of(w, b, xs, y).backward()
            opt.step()
            sched.step()
            assert np.allclose(w.detach().numpy(), ours[it], rtol=1e-6, atol=1e-7), (name, it)


def main():
    check_cosine_against_torch()
    os.makedirs(OUT_DIR, exist_ok=True)
    x, labels, w0, b0 = problem()
    check_caffe_sgd_differs_from_torch(x, labels, w0, b0)
    check_adaptive_against_torch(x, labels, w0, b0)
    for name, arr in [("x", x), ("labels", labels), ("w0", w0), ("b0", b0)]:
        np.save(os.path.join(OUT_DIR, name + ".npy"), arr)
    for name, case in CASES.items():
        ws, bs, lrs = run(case, x, labels, w0, b0)
        np.save(os.path.join(OUT_DIR, name + "_weight.npy"), ws)
        np.save(os.path.join(OUT_DIR, name + "_bias.npy"), bs)
        np.save(os.path.join(OUT_DIR, name + "_lr.npy"), lrs)
        print(f"{name:16s} lr {['%.6g' % l for l in lrs]}  |w5 - w0| = {np.abs(ws[-1] - w0).max():.4g}")


if __name__ == "__main__":
    main()
