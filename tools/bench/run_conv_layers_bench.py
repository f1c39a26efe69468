#!/usr/bin/python3
"""Per-layer convolution times, strata against one or more PyTorch
interpreters, alternating programs within each round; prints a markdown table.

  /usr/bin/python3 tools/bench/run_conv_layers_bench.py --build build --threads 1 --rounds 3 \\
      --torch-python /usr/bin/python3 --torch-python /work/venv-torch2/bin/python

Each program times every layer (strata_bench_conv, torch_conv_layers.py:
forward, and backward to the input and the weights) --reps times and reports
the minimum; the table gives, per layer, the median over rounds of those
minima. --clock cpu uses process CPU time instead of wall time: with one
thread on a machine shared with other work it is the steadier measure (time
spent waiting for a core is not counted)."""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, env):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--clock", choices=["wall", "cpu"], default="cpu")
    p.add_argument("--torch-python", action="append", default=None, metavar="PYTHON")
    a = p.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads),
               OPENBLAS_NUM_THREADS="1")
    common = ["--threads", str(a.threads), "--batch", str(a.batch), "--reps", str(a.reps)]
    programs = {"strata": [os.path.join(a.build, "strata_bench_conv"), *common]}
    for py in a.torch_python or ["/usr/bin/python3"]:
        version = subprocess.run([py, "-c", "import torch; print(torch.__version__)"], check=True,
                                 capture_output=True, text=True).stdout.strip()
        programs[f"PyTorch {version}"] = [py, os.path.join(HERE, "torch_conv_layers.py"), *common]
    key = "_cpu_ms_min" if a.clock == "cpu" else "_ms_min"
    times = {}  # (program, layer, pass) -> [per-round minimum]
    layers = []
    for r in range(a.rounds):
        names = list(programs) if r % 2 == 0 else list(reversed(programs))
        for name in names:
            for row in run(programs[name], env):
                if row["layer"] not in layers:
                    layers.append(row["layer"])
                for pas in ("fwd", "bwd"):
                    times.setdefault((name, row["layer"], pas), []).append(row[pas + key])
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    torches = [n for n in programs if n != "strata"]
    print(f"\nms per layer ({a.clock} time, batch {a.batch}, {a.threads} thread(s)): median over "
          f"{a.rounds} rounds of the minimum of {a.reps} runs; forward / backward (input and weight gradients)\n")
    print("| layer (CxHxW:out:k:pad:stride) | strata | " + " | ".join(torches) + " | fastest PyTorch / strata |")
    print("|---|---|" + "---|" * len(torches) + "---|")
    total = {n: 0.0 for n in programs}
    for layer in layers:
        med = {n: {pas: statistics.median(times[(n, layer, pas)]) for pas in ("fwd", "bwd")} for n in programs}
        for n in programs:
            total[n] += med[n]["fwd"] + med[n]["bwd"]
        best = min(torches, key=lambda n: med[n]["fwd"] + med[n]["bwd"])
        ratio = (med[best]["fwd"] + med[best]["bwd"]) / (med["strata"]["fwd"] + med["strata"]["bwd"])
        print(f"| {layer} | " + " | ".join(f"{med[n]['fwd']:.2f} / {med[n]['bwd']:.2f}" for n in programs) +
              f" | {ratio:.2f} |")
    best = min(torches, key=total.get)
    print(f"| all | " + " | ".join(f"{total[n]:.2f}" for n in programs) + f" | {total[best] / total['strata']:.2f} |")


if __name__ == "__main__":
    main()
