#!/usr/bin/env python3
"""Allreduce bandwidth of torch.distributed's gloo backend, measured exactly as
tools/bench/allreduce_bench.cpp measures strata's: in-place f32 sum of
1, 16, 64, 256 MiB; before each call every rank restores its input and passes
a barrier; an iteration's time is the slowest rank's; the median over timed
iterations is reported with algbw = bytes/time and busbw = algbw * 2(n-1)/n;
rank r's element i is h(i) + r, so every element of the result is checked
against the exact sum. Rank 0 prints one JSON line per size.

Usage (needs PyTorch with gloo, e.g. Debian's python3-torch):
  /usr/bin/python3 tools/bench/gloo_allreduce_bench.py --nproc 4 [--sizes 1,16,64,256]
With --nproc the script starts the ranks itself (as child processes of this
one, rendezvous through a temporary file) and waits for them, at most
--timeout seconds; --rank/--world-size/--init-file run a single rank.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def default_iters(mb):
    return 20 if mb <= 1 else 10 if mb <= 16 else 5 if mb <= 64 else 3


def default_warmup(mb):
    return 3 if mb <= 1 else 1


def run_rank(args):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # the check and the restore; gloo runs its own threads
    dist.init_process_group("gloo", init_method="file://" + args.init_file, rank=args.rank,
                            world_size=args.world_size, timeout=__import__("datetime").timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    for mb in [int(s) for s in args.sizes.split(",")]:
        n = mb * (1 << 20) // 4
        idx = torch.arange(n, dtype=torch.int64)
        h = (((idx * 2654435761) >> 8) & 1023) - 512  # same pattern as allreduce_bench.cpp
        inp = (h + rank).to(torch.float32)
        expected = (h * world + world * (world - 1) // 2).to(torch.float32)
        del idx, h
        buf = torch.empty_like(inp)
        warmup = args.warmup if args.warmup >= 0 else default_warmup(mb)
        iters = args.iters if args.iters > 0 else default_iters(mb)
        times = torch.zeros(iters, dtype=torch.float64)
        wrong = 0
        for it in range(warmup + iters):
            buf.copy_(inp)
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(buf, op=dist.ReduceOp.SUM)
            elapsed = time.perf_counter() - start
            if it >= warmup:
                times[it - warmup] = elapsed
                wrong += int((buf != expected).sum())
        dist.all_reduce(times, op=dist.ReduceOp.MAX)
        w = torch.tensor([wrong], dtype=torch.int64)
        dist.all_reduce(w, op=dist.ReduceOp.SUM)
        if rank == 0:
            t = statistics.median(times.tolist())
            nbytes = n * 4
            algbw = nbytes / t / 1e9
            print(json.dumps({"impl": "gloo", "world_size": world, "size_mb": mb, "bytes": nbytes, "iters": iters,
                              "time_us": round(t * 1e6, 1), "algbw_gbs": round(algbw, 4),
                              "busbw_gbs": round(algbw * 2 * (world - 1) / world, 4), "wrong": int(w[0])}),
                  flush=True)
        del inp, expected, buf
    dist.barrier()
    dist.destroy_process_group()


def launch(args):
    """Starts --nproc ranks of this script and waits for all (bounded by --timeout)."""
    fd, init_file = tempfile.mkstemp(prefix="gloo_bench_")
    os.close(fd)
    os.unlink(init_file)  # torch's FileStore creates it; it must not pre-exist with stale content
    env = dict(os.environ)
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback, like the strata tcp backend on one node
    procs = []
    try:
        for r in range(args.nproc):
            cmd = [sys.executable, os.path.abspath(__file__), "--rank", str(r), "--world-size", str(args.nproc),
                   "--init-file", init_file, "--sizes", args.sizes, "--warmup", str(args.warmup),
                   "--iters", str(args.iters), "--timeout", str(args.timeout)]
            procs.append(subprocess.Popen(cmd, env=env))
        deadline = time.monotonic() + args.timeout
        status = 0
        for p in procs:
            try:
                rc = p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(f"gloo_allreduce_bench: ranks still running after {args.timeout} s; stopping them",
                      file=sys.stderr)
                status = 124
                break
            if rc != 0 and status == 0:
                status = rc
                break  # one rank failed: the others would wait for it until their timeout
        return status
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if os.path.exists(init_file):
            os.unlink(init_file)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nproc", type=int, default=0, help="start this many ranks and wait for them")
    ap.add_argument("--rank", type=int, default=-1)
    ap.add_argument("--world-size", type=int, default=0)
    ap.add_argument("--init-file", default="")
    ap.add_argument("--sizes", default="1,16,64,256", help="MiB of f32, comma-separated")
    ap.add_argument("--warmup", type=int, default=-1, help="untimed iterations (default: by size)")
    ap.add_argument("--iters", type=int, default=-1, help="timed iterations (default: by size)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds before giving up")
    args = ap.parse_args()
    if args.rank >= 0:
        run_rank(args)
        return 0
    if args.nproc < 1:
        ap.error("give --nproc N (or --rank/--world-size/--init-file for one rank)")
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
