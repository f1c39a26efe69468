#!/usr/bin/python3
"""Parameter server against allreduce on this machine: the digits solver with
4 workers (processes), equal workers and then one at half speed
(`strata train --slowdown 2` on rank 1).

For each configuration: training throughput (samples/s over all workers),
time to 97% test accuracy, final accuracy, and the bytes through each server.
Configurations run round-robin, ROUNDS times, so that a busy spell of a shared
machine hits them all alike; the table reports medians.

    /usr/bin/python3 tools/bench/ps_bench.py [--strata build/strata] [--rounds 3] [--max-iter 300]

Writes the table to stdout (markdown, for docs/benchmarks.md).
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
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

CONFIGS = [
    # name, launch flags, train flags
    ("allreduce (tcp)", [], []),
    ("SYNC, central", ["--servers", "1"], ["--ps-mode", "SYNC"]),
    ("ASYNC, central", ["--servers", "1"], ["--ps-mode", "ASYNC"]),
    ("SSP 3, central", ["--servers", "1"], ["--ps-mode", "SSP", "--staleness", "3"]),
    ("ASYNC, 2 sharded", ["--servers", "2"], ["--ps-mode", "ASYNC"]),
]


def run(strata, work, name, launch, train, slow, workers, max_iter):
    prefix = os.path.join(work, "snap")
    shutil.rmtree(prefix, ignore_errors=True)
    solver = os.path.join(work, "solver.prototxt")
    wrapper = ('if [ "$STRATA_RANK" = 1 ]; then exec "$0" "$@" --slowdown 2; else exec "$0" "$@"; fi'
               if slow else 'exec "$0" "$@"')
    cmd = ([strata, "launch", "--nproc", str(workers)] + launch +
           ["--", "bash", "-c", wrapper, strata, "train", "--solver", solver, "--overwrite"] + train)
    t0 = time.time()
    out = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    wall = time.time() - t0
    if out.returncode != 0:
        sys.exit("%s failed:\n%s%s" % (name, out.stdout[-3000:], out.stderr[-3000:]))
    log = [json.loads(l) for l in open(os.path.join(work, "snap", "d_log.jsonl"))]
    tests = [e for e in log if e["event"] == "test"]
    finish = [e for e in log if e["event"] == "finish"][-1]
    to97 = next((e["time_s"] for e in tests if e["outputs"].get("accuracy", 0) >= 0.97), float("nan"))
    server_bytes = [m.group(1) + " / " + m.group(2) for m in
                    re.finditer(r"received ([0-9.]+ [KMG]?i?B), sent ([0-9.]+ [KMG]?i?B)", out.stdout + out.stderr)]
    return {"time": finish["time_s"], "wall": wall, "to97": to97,
            "acc": tests[-1]["outputs"].get("accuracy", float("nan")), "servers": server_bytes}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", default=os.path.join(ROOT, "build", "strata"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-iter", type=int, default=300)
    ap.add_argument("--workers", type=int, default=4)
    a = ap.parse_args()
    strata = os.path.abspath(a.strata)
    work = tempfile.mkdtemp(prefix="ps_bench.")
    for f in ("train.prototxt", "solver.prototxt"):
        shutil.copy(os.path.join(ROOT, "models", "digits", f), work)
    with open(os.path.join(work, "train.prototxt")) as f:
        net = f.read().replace("../../data", os.path.join(ROOT, "data"))
    with open(os.path.join(work, "train.prototxt"), "w") as f:
        f.write(net)
    with open(os.path.join(work, "solver.prototxt")) as f:
        s = f.read()
    s = re.sub(r"max_iter: \d+", "max_iter: %d" % a.max_iter, s)
    s = re.sub(r"test_interval: \d+", "test_interval: 25", s)
    s = re.sub(r'snapshot_prefix: "[^"]*"', 'snapshot_prefix: "snap/d"', s)
    with open(os.path.join(work, "solver.prototxt"), "w") as f:
        f.write(s)
    batch = int(re.search(r"batch_size: (\d+)", net).group(1))
    results = {}
    for r in range(a.rounds):
        for slow in (False, True):
            for name, launch, train in CONFIGS:
                res = run(strata, work, name, launch, train, slow, a.workers, a.max_iter)
                results.setdefault((name, slow), []).append(res)
                print("round %d %-18s %-5s %.1f s, 97%% at %.1f s, acc %.4f" %
                      (r + 1, name, "slow" if slow else "equal", res["time"], res["to97"], res["acc"]),
                      file=sys.stderr, flush=True)
    samples = a.max_iter * batch * a.workers
    print("| workers | configuration | samples/s (median) | vs allreduce | time to 97% (s) | final accuracy | "
          "per server: received / sent (last round) |")
    print("|---|---|---|---|---|---|---|")
    for slow in (False, True):
        base = statistics.median(samples / x["time"] for x in results[("allreduce (tcp)", slow)])
        for name, _, _ in CONFIGS:
            rs = results[(name, slow)]
            sps = statistics.median(samples / x["time"] for x in rs)
            print("| %s | %s | %.0f | %.2fx | %.1f | %.4f | %s |" % (
                "4, one at half speed" if slow else "4 equal", name, sps, sps / base,
                statistics.median(x["to97"] for x in rs), statistics.median(x["acc"] for x in rs),
                "; ".join(rs[-1]["servers"]) or "-"))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
