#!/usr/bin/python3
"""Runs strata's and PyTorch's training-throughput benchmarks alternately
(strata, torch, strata, torch, ...) on this machine and prints a markdown
table of medians and ratios for docs/benchmarks.md.

  /usr/bin/python3 tools/bench/run_train_bench.py --build build --rounds 5

The machine is noisy, so each program runs --rounds times, interleaved, and
the table reports the median over rounds of each round's median.

On a GPU (a build with CUDA):

  /usr/bin/python3 tools/bench/run_train_bench.py --build build --device cuda \
      --models cifar_vgg,vgg16 --precisions FP32,TF32,BF16

runs both on the GPU in each precision and prints images/s, peak memory (the
caching allocator's / torch.cuda's peak allocated) and MFU against the
measured cuBLAS matmul peak of that precision (strata_bench_gpu_gemm)."""
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


def vgg16_train_gflop_per_sample():
    """As cifar_vgg_train_gflop_per_sample, for VGG-16 at 224x224."""
    flops, c, hw = 0, 3, 224
    for n in (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"):
        if n == "M":
            hw //= 2
        else:
            flops += 2 * c * 9 * n * hw * hw
            c = n
    flops += 2 * (512 * 7 * 7 * 4096 + 4096 * 4096 + 4096 * 1000)
    return 3 * flops / 1e9


GFLOP_PER_SAMPLE = {"cifar_vgg": cifar_vgg_train_gflop_per_sample, "vgg16": vgg16_train_gflop_per_sample}


def gpu_main(a, env):
    """GPU table: per model and precision, strata and PyTorch eager, interleaved."""
    peaks = {}
    out = subprocess.run([os.path.join(a.build, "strata_bench_gpu_gemm")], check=True, capture_output=True,
                         text=True).stdout
    for line in out.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            peaks[row["mode"]] = row["tflops_median"]
    print("cuBLAS matmul peak (8192^3, median): " + ", ".join(f"{m} {t:.1f} TFLOP/s" for m, t in peaks.items()))
    rows = {}
    for precision in a.precisions.split(","):
        strata_cmd = [os.path.join(a.build, "strata_bench_train"), "--models", a.models, "--device", a.device,
                      "--precision", precision, "--iters", str(a.iters), "--repeats", "3"]
        torch_cmd = ["/usr/bin/python3", os.path.join(HERE, "torch_train_throughput.py"), "--models", a.models,
                     "--device", a.device, "--precision", precision, "--iters", str(a.iters), "--repeats", "3"]
        for r in range(a.rounds):
            for impl, cmd in (("strata", strata_cmd), ("pytorch", torch_cmd)):
                for model, row in run(cmd, env).items():
                    rows.setdefault((model, precision, impl), []).append(row)
            print(f"{precision}: round {r + 1}/{a.rounds} done", file=sys.stderr)
    print()
    print("| model | batch | precision | strata img/s | PyTorch img/s | strata / PyTorch | strata peak MiB | "
          "PyTorch peak MiB | strata MFU | PyTorch MFU |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model in a.models.split(","):
        for precision in a.precisions.split(","):
            s, t = rows[(model, precision, "strata")], rows[(model, precision, "pytorch")]
            sv = statistics.median(x["samples_per_s"] for x in s)
            tv = statistics.median(x["samples_per_s"] for x in t)
            smem = max(x["peak_allocated_bytes"] for x in s) / 2**20
            tmem = max(x["peak_allocated_bytes"] for x in t) / 2**20
            flop = GFLOP_PER_SAMPLE[model]() if model in GFLOP_PER_SAMPLE else float("nan")
            peak = peaks.get(precision, peaks.get("TF32")) * 1e3  # GFLOP/s
            print(f"| {model} | {s[0]['batch']} | {precision} | {sv:.1f} | {tv:.1f} | {sv / tv:.2f} | {smem:.0f} | "
                  f"{tmem:.0f} | {100 * sv * flop / peak:.0f}% | {100 * tv * flop / peak:.0f}% |")


def run(cmd, env):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return {r["model"]: r for r in (json.loads(line) for line in out.splitlines() if line.startswith("{"))}


def cpu_description():
    """The CPU as lscpu names it: model, family/model numbers, and its vector flags."""
    info = {}
    out = subprocess.run(["lscpu"], capture_output=True, text=True, env=dict(os.environ, LC_ALL="C")).stdout
    for line in out.splitlines():
        key, _, value = line.partition(":")
        info[key.strip()] = value.strip()
    flags = [f for f in info.get("Flags", "").split() if f.startswith(("avx", "fma", "amx"))]
    return (f"{info.get('Model name', '?')} (vendor {info.get('Vendor ID', '?')}, family {info.get('CPU family', '?')} "
            f"model {info.get('Model', '?')}, {info.get('CPU(s)', '?')} CPUs); flags: {' '.join(flags)}")


def torch_configs(pythons, env, threads):
    """One PyTorch configuration per interpreter and BLAS thread count: PyTorch
    gets `threads` intra-op threads; where its BLAS is OpenBLAS (Debian's) the
    BLAS pool is tried at one thread (torch parallelises around BLAS calls) and
    at `threads`. Debian's build reports BLAS_INFO=generic (the system BLAS,
    OpenBLAS); PyPI's wheels use MKL, which the OpenBLAS setting does not touch."""
    configs = {}
    for py in pythons:
        probe = subprocess.run([py, "-c", "import torch; print(torch.__version__); print(torch.__config__.show())"],
                               check=True, capture_output=True, text=True).stdout
        version = probe.splitlines()[0].strip()
        openblas = "BLAS_INFO=generic" in probe or "BLAS_INFO=open" in probe
        for blas in sorted({1, threads}) if openblas else [threads]:
            e = dict(env)
            e["OPENBLAS_NUM_THREADS"] = str(blas)
            name = f"PyTorch {version}" + (f" (OPENBLAS_NUM_THREADS={blas})" if openblas else "")
            configs[name] = (py, e)
    return configs


def cpu_main(a):
    """CPU table: strata against every PyTorch configuration, alternating
    within each round (strata first in even rounds, last in odd ones)."""
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(a.threads)
    configs = torch_configs(a.torch_python or ["/usr/bin/python3"], env, a.threads)
    strata_cmd = [os.path.join(a.build, "strata_bench_train"), "--models", a.models, "--threads",
                  str(a.threads), "--iters", str(a.iters), "--repeats", "3"]
    strata_env = dict(env)
    if a.cpu_isa:
        strata_env["STRATA_CPU_ISA"] = a.cpu_isa
    results = {name: {} for name in ["strata", *configs]}
    for r in range(a.rounds):
        order = ["strata", *configs] if r % 2 == 0 else [*configs, "strata"]
        for name in order:
            if name == "strata":
                cmd, e = strata_cmd, strata_env
            else:
                py, e = configs[name]
                cmd = [py, os.path.join(HERE, "torch_train_throughput.py"), "--models", a.models, "--threads",
                       str(a.threads), "--iters", str(a.iters), "--repeats", "3"]
            for model, row in run(cmd, e).items():
                results[name].setdefault(model, []).append(row["samples_per_s"])
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)

    sgemm = subprocess.run([os.path.join(a.build, "strata_bench_sgemm"), str(a.threads), "1024"],
                           check=True, capture_output=True, text=True, env=strata_env).stdout
    peak = json.loads(sgemm)["gflops_median"]
    print(f"\nCPU: {cpu_description()}")
    print(f"strata's CPU path: {a.cpu_isa or 'the best this CPU runs'} (STRATA_CPU_ISA"
          f"{'=' + a.cpu_isa if a.cpu_isa else ' unset'}); command: {' '.join(sys.argv)}")
    print(f"SGEMM peak (1024^3, {a.threads} threads): {peak:.1f} GFLOP/s (median)")
    if "cifar_vgg" in results["strata"]:
        rate = statistics.median(results["strata"]["cifar_vgg"]) * cifar_vgg_train_gflop_per_sample()
        print(f"cifar_vgg: {cifar_vgg_train_gflop_per_sample():.3f} GFLOP per training sample (direct "
              f"convolution); strata reaches {rate:.1f} GFLOP/s = {100 * rate / peak:.0f}% of the SGEMM peak")
    print()
    print("| model | batch | strata samples/s | " + " | ".join(f"{n} samples/s" for n in configs) +
          " | strata / fastest PyTorch (median of rounds) | per-round ratios |")
    print("|---|---|---|" + "---|" * len(configs) + "---|---|")
    batches = {"mlp": 128, "lenet": 64, "cifar_vgg": 32}
    for model in a.models.split(","):
        s = results["strata"][model]
        medians = {name: statistics.median(results[name][model]) for name in configs}
        best = max(medians, key=medians.get)
        ratios = [x / y for x, y in zip(s, results[best][model])]
        print(f"| {model} | {batches[model]} | {statistics.median(s):.1f} | " +
              " | ".join(f"{medians[n]:.1f}" for n in configs) +
              f" | {statistics.median(ratios):.2f} (against {best}) | {', '.join(f'{q:.2f}' for q in ratios)} |")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build")
    p.add_argument("--models", default="mlp,lenet,cifar_vgg")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--device", default="cpu", help="cpu, or cuda / cuda:N for the GPU table")
    p.add_argument("--precisions", default="FP32,TF32,BF16", help="GPU only: comma-separated precisions")
    p.add_argument("--cpu-isa", choices=["avx512", "avx2", "portable"], default=None,
                   help="CPU only: strata's kernel path (STRATA_CPU_ISA; default the best this CPU runs)")
    p.add_argument("--torch-python", action="append", default=None, metavar="PYTHON",
                   help="CPU only: an interpreter with PyTorch to compare with (repeatable; default "
                        "/usr/bin/python3, Debian's PyTorch); every one runs in every round")
    a = p.parse_args()
    if a.device != "cpu":
        gpu_main(a, dict(os.environ))
        return

    cpu_main(a)


if __name__ == "__main__":
    main()
