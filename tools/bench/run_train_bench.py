#!/usr/bin/python3
"""Runs strata's and PyTorch's training-throughput benchmarks alternately
(strata, torch, strata, torch, ...) on this machine and prints a markdown
table of medians and ratios for docs/benchmarks.md.

  /usr/bin/python3 tools/bench/run_train_bench.py --build build --rounds 5

The machine is noisy, so each program runs --rounds times, interleaved, and
the table reports the median over rounds of each round's median."""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def cifar_vgg_train_gflop_per_sample():
    """Forward FLOPs of cifar_vgg's convolutions and fc layers (2 per multiply-add), times 3
    for forward + backward (data and weight gradients)."""
    flops, c, hw = 0, 3, 32
    for n in (64, 64, "M", 128, 128, "M", 256, 256, "M"):
        if n == "M":
            hw //= 2
        else:
            flops += 2 * c * 9 * n * hw * hw
            c = n
    flops += 2 * (256 * 4 * 4 * 256 + 256 * 10)
    return 3 * flops / 1e9


def run(cmd, env):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return {r["model"]: r for r in (json.loads(line) for line in out.splitlines() if line.startswith("{"))}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build")
    p.add_argument("--models", default="mlp,lenet,cifar_vgg")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    a = p.parse_args()

    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(a.threads)
    # PyTorch gets a.threads intra-op threads; its BLAS pool is tried both at
    # one thread (torch parallelises around BLAS calls) and at a.threads, and
    # the faster setting is reported for each model.
    torch_envs = {}
    for blas in sorted({1, a.threads}):
        e = dict(env)
        e["OPENBLAS_NUM_THREADS"] = str(blas)
        torch_envs[f"pytorch (OPENBLAS_NUM_THREADS={blas})"] = e
    strata_cmd = [os.path.join(a.build, "strata_bench_train"), "--models", a.models, "--threads",
                  str(a.threads), "--iters", str(a.iters), "--repeats", "3"]
    torch_cmd = ["/usr/bin/python3", os.path.join(HERE, "torch_train_throughput.py"), "--models", a.models,
                 "--threads", str(a.threads), "--iters", str(a.iters), "--repeats", "3"]
    results = {"strata": {}}
    for name in torch_envs:
        results[name] = {}
    for r in range(a.rounds):
        for model, row in run(strata_cmd, env).items():
            results["strata"].setdefault(model, []).append(row["samples_per_s"])
        for name, e in torch_envs.items():
            for model, row in run(torch_cmd, e).items():
                results[name].setdefault(model, []).append(row["samples_per_s"])
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)

    sgemm = subprocess.run([os.path.join(a.build, "strata_bench_sgemm"), str(a.threads), "1024"],
                           check=True, capture_output=True, text=True).stdout
    peak = json.loads(sgemm)["gflops_median"]
    print(f"\nSGEMM peak (1024^3, {a.threads} threads): {peak:.1f} GFLOP/s (median)")
    if "cifar_vgg" in results["strata"]:
        rate = statistics.median(results["strata"]["cifar_vgg"]) * cifar_vgg_train_gflop_per_sample()
        print(f"cifar_vgg: {cifar_vgg_train_gflop_per_sample():.3f} GFLOP per training sample; strata reaches "
              f"{rate:.1f} GFLOP/s = {100 * rate / peak:.0f}% of the SGEMM peak")
    print()
    print("| model | batch | strata samples/s | PyTorch samples/s (best BLAS setting) | strata / PyTorch | "
          "per-round ratios | other PyTorch setting |")
    print("|---|---|---|---|---|---|---|")
    batches = {"mlp": 128, "lenet": 64, "cifar_vgg": 32}
    for model in a.models.split(","):
        s = results["strata"][model]
        medians = {name: statistics.median(results[name][model]) for name in torch_envs}
        best = max(medians, key=medians.get)
        t = results[best][model]
        ratios = [x / y for x, y in zip(s, t)]
        others = "; ".join(f"{n}: {m:.1f}" for n, m in medians.items() if n != best)
        print(f"| {model} | {batches[model]} | {statistics.median(s):.1f} | {statistics.median(t):.1f} "
              f"({best.split('(')[1].rstrip(')')}) | {statistics.median(ratios):.2f} | "
              f"{', '.join(f'{q:.2f}' for q in ratios)} | {others} |")


if __name__ == "__main__":
    main()
