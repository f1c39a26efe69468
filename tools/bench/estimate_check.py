#!/usr/bin/python3
"""Checks `strata estimate` against measured runs on this machine: the digits
net trained by 1 process and by 2-4 data-parallel ranks over tcp and over
shared memory, by pipelines of 2-4 stages (4 micro-batches), and against a parameter server (SYNC,
central and 2 shards); every process with one thread. Measured speedup =
samples/s of the run / samples/s of one process (medians of ROUNDS
alternated rounds). The predictions come from `strata estimate` with the link
measured between two ranks of a launched job over the same transport
(`--link measured`), the layer times measured by it, and --host-cores set to
this machine's cores (more workers than cores share them).

    /usr/bin/python3 tools/bench/estimate_check.py [--strata build/strata] [--rounds 3] [--iters 150]

Prints the measured speedups, then each transport's `strata estimate` table
with predicted against measured and the error per case.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def train(strata, work, launch, flags, env_extra, iters, batch, batches_per_step):
    shutil.rmtree(os.path.join(work, "snap"), ignore_errors=True)
    cmd = ([strata] + (["launch"] + launch + ["--", strata] if launch else []) +
           ["train", "--solver", "solver.prototxt", "--overwrite", "--threads", "1"] + flags)
    env = dict(os.environ, **env_extra)
    out = subprocess.run(cmd, cwd=work, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit("%s failed:\n%s%s" % (" ".join(cmd), out.stdout[-3000:], out.stderr[-3000:]))
    log = [json.loads(l) for l in open(os.path.join(work, "snap", "d_log.jsonl"))]
    first = [e for e in log if e["event"] == "iteration"][0]
    finish = [e for e in log if e["event"] == "finish"][-1]
    # From the first progress line on: start-up and the first iterations' warm-up left out.
    steps = finish["iter"] - first["iter"]
    return steps * batch * batches_per_step / (finish["time_s"] - first["time_s"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", default=os.path.join(ROOT, "build", "strata"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=150)
    a = ap.parse_args()
    strata = os.path.abspath(a.strata)
    cores = os.cpu_count()
    work = tempfile.mkdtemp(prefix="estimate_check.")
    for f in ("train.prototxt", "solver.prototxt"):
        shutil.copy(os.path.join(ROOT, "models", "digits", f), work)
    with open(os.path.join(work, "train.prototxt")) as f:
        net = f.read().replace("../../data", os.path.join(ROOT, "data"))
    with open(os.path.join(work, "train.prototxt"), "w") as f:
        f.write(net)
    with open(os.path.join(work, "solver.prototxt")) as f:
        s = f.read()
    s = re.sub(r"max_iter: \d+", "max_iter: %d" % a.iters, s)
    s = re.sub(r"test_interval: \d+", "test_interval: 0", s)
    s = re.sub(r"display: \d+", "display: 10", s)
    s = re.sub(r'snapshot_prefix: "[^"]*"', 'snapshot_prefix: "snap/d"', s)
    s += "\nsnapshot_after_train: false\n"
    with open(os.path.join(work, "solver.prototxt"), "w") as f:
        f.write(s)
    batch = int(re.search(r"batch_size: (\d+)", net).group(1))

    # name, strategy, workers, transport, launch flags, train flags
    cases = [("1 process", None, 1, None, [], [])]
    for transport in ("tcp", "shm"):
        for n in (2, 3, 4):
            cases.append(("dp %d %s" % (n, transport), "dp-ring", n, transport, ["--nproc", str(n)],
                          ["--dp-transport", transport, "--dp-algorithm", "ring"]))
    for n in (2, 3, 4):
        cases.append(("pipeline %d shm" % n, "pipeline", n, "shm", ["--nproc", str(n)],
                      ["--pp", str(n), "--micro-batches", "4"]))
    cases.append(("ps SYNC central, 2 workers shm", "ps-central-worst", 2, "shm", ["--nproc", "2", "--servers", "1"],
                  ["--ps-mode", "SYNC", "--dp-transport", "shm"]))
    cases.append(("ps SYNC 2 shards, 2 workers shm", "ps-sharded", 2, "shm", ["--nproc", "2", "--servers", "2"],
                  ["--ps-mode", "SYNC", "--dp-transport", "shm"]))
    rates = {}
    for r in range(a.rounds):
        for name, strategy, n, transport, launch, flags in cases:
            # A pipeline holds one replica; a step is its micro-batches, each one data-layer batch.
            per_step = 4 if strategy == "pipeline" else n
            rate = train(strata, work, launch, flags, {}, a.iters, batch, per_step)
            rates.setdefault(name, []).append(rate)
            print("round %d %-32s %8.0f samples/s" % (r + 1, name, rate), file=sys.stderr, flush=True)
    base = statistics.median(rates["1 process"])
    print("1 process: %.0f samples/s (median of %d)" % (base, a.rounds))
    for transport in ("tcp", "shm"):
        csv = os.path.join(work, "measured_%s.csv" % transport)
        with open(csv, "w") as f:
            f.write("strategy,workers,speedup\n")
            for name, strategy, n, t, _, _ in cases:
                if t == transport:
                    f.write("%s,%d,%.4f\n" % (strategy, n, statistics.median(rates[name]) / base))
        env = dict(os.environ, STRATA_SHM="0" if transport == "tcp" else "1")
        cmd = [strata, "launch", "--nproc", "2", "--", strata, "estimate", "--model", "train.prototxt",
               "--link", "measured", "--workers", "1,2,3,4", "--host-cores", str(cores), "--threads", "1",
               "--micro-batches", "4", "--measured", csv, "--strategy",
               "dp-ring,pipeline,ps-central-worst,ps-sharded"]
        out = subprocess.run(cmd, cwd=work, capture_output=True, text=True, env=env)
        shown = ("STRATA_SHM=0 " if transport == "tcp" else "") + " ".join(
            os.path.basename(c) if c == strata else c.replace(work + "/", "") for c in cmd)
        print("\n### %s transport\n\n    %s\n" % (transport, shown))
        print("\n".join("    " + re.sub(r"^\[rank 0\] ", "", l) for l in out.stdout.splitlines()))
        if out.returncode != 0:
            print(out.stderr[-2000:])
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
