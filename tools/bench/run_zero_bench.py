#!/usr/bin/python3
"""Sharded data parallel (ZeRO stages 0-3) benchmark for docs/benchmarks.md.

For cifar_vgg (and, with --models, vit_ti16) on synthetic data (an Input
layer of zeros, as tools/bench/run_pipeline_bench.py makes it), trains with
`strata launch --nproc N -- strata train --shard S` for S in NONE, OPTIMIZER,
GRADIENTS and PARAMETERS, rounds alternating, and prints per stage:
  - images/s (median over the rounds; from the JSON log's time_s after the
    warm-up iterations);
  - what rank 0 holds by the start line's formula (parameters, gradients
    with reduce buffers, optimizer state);
  - rank 0's tensor storage: its peak and what is in use at the end
    ("rank 0: peak tensor storage ...", printed at the end of the run);
  - rank 0's maximum resident set (/usr/bin/time -f %M around each rank).
Then, as the reference, PyTorch on the same model with torch.distributed
(gloo, N processes, one thread each): DistributedDataParallel with SGD, and
with ZeroRedundancyOptimizer (stage 1), their images/s and max RSS
(tools/bench/torch_zero.py); with --fsdp-python (a venv of PyPI's torch),
that torch's DDP and FSDP (fully_shard, stage 3: a unit per layer, and the
whole model one unit) as well. Debian's torch 1.13 has no CPU FSDP.

  /usr/bin/python3 tools/bench/run_zero_bench.py --build build-cpu
  /usr/bin/python3 tools/bench/run_zero_bench.py --build build-cpu --fsdp-python /work/venv-torch2/bin/python
  /usr/bin/python3 tools/bench/run_zero_bench.py --build build-cpu --smoke   # seconds
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_pipeline_bench as pipe  # noqa: E402  (synthetic nets, solver text, log parsing)

STAGES = ["NONE", "OPTIMIZER", "GRADIENTS", "PARAMETERS"]


def strata_run(strata, solver, stage, nproc, threads, warmup, batch, timeout, log):
    cmd = [strata, "launch", "--nproc", str(nproc), "--", "/usr/bin/time", "-f", "maxrss_kib %M", strata, "train",
           "--solver", solver, "--threads", str(threads), "--dp-transport", "shm", "--shard", stage]
    rc, out = pipe.run(cmd, timeout)
    if rc != 0:
        sys.exit("run_zero_bench: strata failed (%s):\n%s" % (" ".join(cmd), out[-3000:]))
    ips, mem, _ = pipe.parse_run(out, log, warmup, batch * nproc)
    holds = re.search(r"rank 0 holds (parameters .*)$", out, re.M)
    rss = [int(x) / 1024.0 for x in re.findall(r"maxrss_kib (\d+)", out)]
    plain = re.search(r"\(plain data parallel: (parameters .*)\)$", out, re.M)
    what = holds.group(1) if holds else "(whole) " + plain.group(1) if plain else "(whole)"
    return ips, mem.get(0), what, max(rss) if rss else None


def torch_run(torch_python, model, batch, nproc, iters, warmup, mode, timeout):
    cmd = [torch_python, os.path.join(HERE, "torch_zero.py"), "--model", model, "--batch", str(batch), "--nproc",
           str(nproc), "--iters", str(iters), "--warmup", str(warmup)] + mode
    rc, out = pipe.run(cmd, timeout)
    if rc != 0:
        sys.exit("run_zero_bench: torch failed (%s):\n%s" % (" ".join(cmd), out[-3000:]))
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="CMake build folder holding the strata binary")
    ap.add_argument("--models", default="cifar_vgg")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32, help="images per rank per step")
    ap.add_argument("--iters", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="threads per rank")
    ap.add_argument("--bucket-mb", default="", help="strata's bucket size (default: its own, 25 MiB)")
    ap.add_argument("--torch-python", default="/usr/bin/python3", help="'' skips the PyTorch rows")
    ap.add_argument("--fsdp-python", default="",
                    help="a Python with torch >= 2.6 (e.g. a venv of PyPI's torch): adds its DDP and FSDP rows")
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--smoke", action="store_true", help="batch 2, 4 iterations, 1 round")
    a = ap.parse_args()
    if a.smoke:
        a.batch, a.iters, a.warmup, a.rounds = 2, 4, 1, 1
    strata = os.path.abspath(os.path.join(a.build, "strata"))
    if not os.path.exists(strata):
        sys.exit("run_zero_bench: no %s; build strata first" % strata)
    work = tempfile.mkdtemp(prefix="zero_bench_")
    for model in a.models.split(","):
        net = os.path.join(work, model + ".prototxt")
        with open(net, "w") as f:
            f.write(pipe.synthetic_net(model, a.batch, "", "", 12))
        results = {s: [] for s in STAGES}
        # (row name, interpreter, torch_zero.py mode flags)
        torch_runs = []
        if a.torch_python:
            torch_runs += [("DDP", a.torch_python, ["--mode", "ddp"]),
                           ("ZeroRedundancyOptimizer", a.torch_python, ["--mode", "zero"])]
        if a.fsdp_python:
            torch_runs += [("DDP ", a.fsdp_python, ["--mode", "ddp"]),
                           ("FSDP (a unit per layer)", a.fsdp_python, ["--mode", "fsdp", "--fsdp-units", "layer"]),
                           ("FSDP (one unit)", a.fsdp_python, ["--mode", "fsdp", "--fsdp-units", "model"])]
        torch_rows = {name: [] for name, _, _ in torch_runs}
        for r in range(a.rounds):
            for stage in STAGES:
                prefix = os.path.join(work, "%s_%s_%d" % (model, stage, r))
                solver = prefix + "_solver.prototxt"
                with open(solver, "w") as f:
                    f.write(pipe.solver_text(net, a.iters, 1, prefix))
                    if a.bucket_mb:
                        f.write("parallel { data { bucket_mb: %s } }\n" % a.bucket_mb)
                results[stage].append(strata_run(strata, solver, stage, a.nproc, a.threads, a.warmup, a.batch,
                                                 a.timeout, prefix + "_log.jsonl"))
            for name, python, mode in torch_runs:
                torch_rows[name].append(torch_run(python, model, a.batch, a.nproc, a.iters, a.warmup, mode,
                                                  a.timeout))
        print("\n%s, %d ranks, batch %d per rank, %d thread(s) per rank, shm, %d rounds (medians)\n"
              % (model, a.nproc, a.batch, a.threads, a.rounds))
        print("| run | images/s | rank 0 holds (start line) | rank 0 tensor peak / at the end (MiB) | rank 0 max RSS (MiB) |")
        print("|---|---|---|---|---|")
        for stage in STAGES:
            rows = results[stage]
            ips = statistics.median([x[0] for x in rows if x[0]])
            peak = statistics.median([x[1][0] for x in rows if x[1]])
            end = statistics.median([x[1][1] for x in rows if x[1]])
            rss = statistics.median([x[3] for x in rows if x[3]])
            print("| strata --shard %s | %.1f | %s | %.1f / %.1f | %.0f |" % (stage, ips, rows[-1][2], peak, end, rss))
        for name, rows in torch_rows.items():
            if rows:
                print("| PyTorch %s %s | %.1f | | | %.0f |" % (rows[-1]["torch"], name.strip(),
                                                             statistics.median([x["images_per_s"] for x in rows]),
                                                             statistics.median([x["max_rss_mib"] for x in rows])))


if __name__ == "__main__":
    main()
