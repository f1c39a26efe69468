#!/usr/bin/python3
"""Peak memory of CPU training: strata (blob_memory BY_LIFETIME and SEPARATE)
against PyTorch, the same models, batch and optimizer (SGD with momentum),
each program in its own process, alternating, the maximum resident set size
of each process read from /usr/bin/time, in FP32 or (--precision BF16) with
strata's activations stored in bf16 against PyTorch's CPU autocast. Prints a
Markdown table of the medians over --rounds and the ratios to the best PyTorch.

  /usr/bin/python3 tools/bench/run_memory_bench.py --build build-cpu \\
      --torch-python /usr/bin/python3 --torch-python /work/venv-torch2/bin/python

Memory, not speed: the runs are short (--iters steps after no warm-up)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def max_rss_kb(cmd, env):
    """Runs cmd under /usr/bin/time; returns its maximum resident set size in KiB and its stdout."""
    with tempfile.NamedTemporaryFile(mode="r", suffix=".time") as out:
        run = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", out.name] + cmd, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if run.returncode != 0:
            sys.exit("failed (%d): %s\n%s" % (run.returncode, " ".join(cmd), run.stderr[-2000:]))
        return int(out.read().strip().splitlines()[-1]), run.stdout


def torch_version(python):
    return subprocess.run([python, "-c", "import torch; print(torch.__version__)"], stdout=subprocess.PIPE,
                          text=True, check=True).stdout.strip()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build-cpu")
    p.add_argument("--models", default="vgg16,vit_b16")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--iters", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--torch-python", action="append", default=[])
    p.add_argument("--precision", default="FP32", choices=["FP32", "BF16"],
                   help="BF16: strata stores activations in bf16 (precision: BF16), PyTorch runs under CPU autocast")
    a = p.parse_args()
    pythons = a.torch_python or ["/usr/bin/python3"]
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), OPENBLAS_NUM_THREADS=str(a.threads))
    bench = os.path.join(a.build, "strata_bench_train")
    common = ["--batch", str(a.batch), "--iters", str(a.iters), "--warmup", "0", "--repeats", "1", "--threads",
              str(a.threads), "--precision", a.precision]
    programs = [("strata BY_LIFETIME", lambda m: [bench, "--models", m, "--blob-memory", "BY_LIFETIME"] + common),
                ("strata SEPARATE", lambda m: [bench, "--models", m, "--blob-memory", "SEPARATE"] + common),
                ("strata BY_LIFETIME, every block recomputed",
                 lambda m: [bench, "--models", m, "--blob-memory", "BY_LIFETIME", "--recompute", "blocks"] + common)]
    for py in pythons:
        programs.append(("PyTorch " + torch_version(py),
                         lambda m, py=py: [py, os.path.join(HERE, "torch_throughput.py"), "--task", "train",
                                           "--models", m] + common))
    print("| model | " + " | ".join(name for name, _ in programs) +
          " | BY_LIFETIME / best PyTorch | strata's plan / its tensor peak |")
    print("|---" * (len(programs) + 3) + "|")
    for model in a.models.split(","):
        rss = {name: [] for name, _ in programs}
        plan = ""
        for _ in range(a.rounds):
            for name, cmd in programs:
                kb, out = max_rss_kb(cmd(model), env)
                rss[name].append(kb)
                if name == "strata BY_LIFETIME":
                    # The start-up plan (strata train's start line) against the
                    # tensor storage the run held at its peak: the same every round.
                    r = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
                    plan = "%.2f / %.2f GiB" % (r["planned_bytes"] / 2.0**30, r["tensor_peak_bytes"] / 2.0**30)
        med = {name: statistics.median(v) / 1024.0 / 1024.0 for name, v in rss.items()}
        best_torch = min(v for k, v in med.items() if k.startswith("PyTorch"))
        cells = ["%.2f GiB" % med[name] for name, _ in programs]
        print("| %s (batch %d) | %s | %.2f | %s |" % (model, a.batch, " | ".join(cells),
                                                      med["strata BY_LIFETIME"] / best_torch, plan), flush=True)


if __name__ == "__main__":
    main()
