#!/usr/bin/python3
"""Allreduce bandwidth on this machine: strata's tcp backend (ring and tree),
torch.distributed gloo, and MPI, run alternately for each world size, several
rounds, then a markdown table of the medians over rounds (algbw / busbw in
GB/s, nccl-tests conventions), wrong-element counts, and our ratio to gloo
and MPI.

  /usr/bin/python3 tools/bench/run_allreduce_bench.py --build build --nprocs 2,4 --rounds 3

Implementations (--impls, comma-separated; those whose programs are missing
are skipped with a note):
  ring, tree  strata launch --nproc N -- strata_bench_allreduce --backend tcp --algorithm ring|tree
              (transport auto: shared memory between these local ranks)
  ring-tcp, ring-shm, ring-rdma
              the ring over one transport (--transport tcp|shm|rdma); rdma is libfabric: its verbs
              provider on InfiniBand/RoCE, or STRATA_FABRIC_PROVIDER=tcp (a software provider) on a
              machine without an RDMA device. Not run by default; the table adds rdma / tcp and
              rdma / shm ratios when they are run.
  gloo        tools/bench/gloo_allreduce_bench.py --nproc N (torch.distributed, GLOO_SOCKET_IFNAME=lo)
  mpi         mpirun -np N strata_bench_mpi_allreduce over OpenMPI's shared-memory transport
              (pml ob1, btl self,vader: what MPI uses between ranks of one node)
  mpi-tcp     the same over loopback TCP (btl self,tcp on lo: the same transport as ours and gloo's)
  strata-mpi  mpirun -np N strata_bench_allreduce --backend mpi (our mpi backend; not run by default)
Every program measures the same way (see allreduce_bench.cpp). Ranks are not
pinned to cores (--bind-to none for mpirun), as with strata launch and gloo,
and MPI yields the core while it polls (mpi_yield_when_idle 1).
Each run is killed after --run-timeout seconds, and no new run starts after
--max-minutes, so the driver always finishes; missing cells print as "-".
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_IMPLS = "ring,tree,gloo,mpi,mpi-tcp"
LABELS = {"ring": "strata ring", "tree": "strata tree", "gloo": "gloo", "mpi": "MPI shm", "mpi-tcp": "MPI tcp",
          "strata-mpi": "strata mpi", "ring-tcp": "ring/tcp", "ring-shm": "ring/shm", "ring-rdma": "ring/rdma"}
# mpi_yield_when_idle: MPI's blocking calls otherwise spin without yielding,
# which starves the peer they wait for when ranks share cores (as here, and
# as strata's and gloo's ranks, which block in the kernel, never do).
MPIRUN_FLAGS = ["--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "--mca", "pml", "ob1",
                "--mca", "osc", "^ucx", "--mca", "mpi_yield_when_idle", "1"]


def which(name):
    for d in os.environ.get("PATH", "").split(os.pathsep):
        p = os.path.join(d, name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def command(impl, n, a):
    """The command line for one run, or (None, reason) when it cannot run here."""
    strata = os.path.join(a.build, "strata")
    ours = os.path.join(a.build, "strata_bench_allreduce")
    mpi_bench = os.path.join(a.build, "strata_bench_mpi_allreduce")
    mpirun = which("mpirun")
    sizes = ["--sizes", a.sizes]
    if impl in ("ring", "tree"):
        if not (os.path.exists(strata) and os.path.exists(ours)):
            return None, f"{strata} or {ours} not built"
        return [strata, "launch", "--nproc", str(n), "--", ours, "--backend", "tcp", "--algorithm", impl] + sizes, ""
    if impl in ("ring-tcp", "ring-shm", "ring-rdma"):
        if not (os.path.exists(strata) and os.path.exists(ours)):
            return None, f"{strata} or {ours} not built"
        return [strata, "launch", "--nproc", str(n), "--", ours, "--backend", "tcp", "--algorithm", "ring",
                "--transport", impl.split("-")[1]] + sizes, ""
    if impl == "gloo":
        return [a.python, os.path.join(HERE, "gloo_allreduce_bench.py"), "--nproc", str(n), "--timeout",
                str(a.run_timeout)] + sizes, ""
    if impl in ("mpi", "mpi-tcp"):
        if not mpirun or not os.path.exists(mpi_bench):
            return None, "mpirun or strata_bench_mpi_allreduce missing (built only when CMake finds MPI)"
        btl = ["--mca", "btl", "self,vader"] if impl == "mpi" else \
              ["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"]
        return [mpirun] + MPIRUN_FLAGS + btl + ["-np", str(n), mpi_bench, "--label", impl] + sizes, ""
    if impl == "strata-mpi":
        if not mpirun or not os.path.exists(ours):
            return None, "mpirun or strata_bench_allreduce missing"
        return [mpirun] + MPIRUN_FLAGS + ["--mca", "btl", "self,vader", "-np", str(n), ours, "--backend",
                                          "mpi"] + sizes, ""
    return None, f"unknown implementation '{impl}'"


def run_one(cmd, timeout):
    """Runs cmd in its own process group; returns (results, error text)."""
    env = dict(os.environ)
    env.setdefault("PMIX_MCA_gds", "hash")  # PMIx's shared-memory store fails in some containers
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                break
            time.sleep(2)
        out, err = p.communicate()
        return [], f"killed after {timeout} s"
    results = []
    for line in out.splitlines():
        brace = line.find("{")  # strata launch prefixes "[rank 0] "
        if brace >= 0:
            try:
                results.append(json.loads(line[brace:]))
            except json.JSONDecodeError:
                pass
    if p.returncode != 0:
        return results, f"exit status {p.returncode}: {err.strip()[-600:]}"
    return results, ""


def fmt(x, digits=2):
    return "-" if x is None else f"{x:.{digits}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(os.path.dirname(os.path.dirname(HERE)), "build"),
                    help="CMake build directory (default: build/ of this checkout)")
    ap.add_argument("--nprocs", default="2,4", help="world sizes, comma-separated")
    ap.add_argument("--sizes", default="1,16,64,256", help="MiB of f32, comma-separated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--impls", default=DEFAULT_IMPLS)
    ap.add_argument("--python", default="/usr/bin/python3", help="python with torch (for gloo)")
    ap.add_argument("--run-timeout", type=int, default=300, help="seconds before one run is killed")
    ap.add_argument("--max-minutes", type=float, default=45, help="start no run after this many minutes")
    ap.add_argument("--json", default="", help="also write every raw result line to this file")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    nprocs = [int(x) for x in a.nprocs.split(",")]
    sizes = [int(x) for x in a.sizes.split(",")]
    impls = a.impls.split(",")

    runnable = []
    for impl in impls:
        cmd, why = command(impl, 2, a)
        if cmd is None:
            print(f"skipping {impl}: {why}", file=sys.stderr)
        else:
            runnable.append(impl)

    results = {}  # (impl, n, size_mb) -> list of result dicts, one per round
    raw = []
    failures = []
    start = time.monotonic()
    stopped_early = False
    for rnd in range(a.rounds):
        # Rotate the order each round so that no implementation always runs first (or after the same one).
        order = runnable[rnd % len(runnable):] + runnable[:rnd % len(runnable)] if runnable else []
        for n in nprocs:
            for impl in order:
                if time.monotonic() - start > a.max_minutes * 60:
                    stopped_early = True
                    break
                cmd, _ = command(impl, n, a)
                t0 = time.monotonic()
                got, err = run_one(cmd, a.run_timeout)
                print(f"round {rnd + 1}/{a.rounds} n={n} {impl}: {len(got)} sizes in {time.monotonic() - t0:.1f} s"
                      + (f" ({err})" if err else ""), file=sys.stderr, flush=True)
                if err:
                    failures.append(f"round {rnd + 1} n={n} {impl}: {err}")
                for r in got:
                    raw.append(r)
                    results.setdefault((impl, n, r["size_mb"]), []).append(r)
    if a.json:
        with open(a.json, "w") as f:
            for r in raw:
                f.write(json.dumps(r) + "\n")

    def med(impl, n, mb, key):
        rs = results.get((impl, n, mb))
        return statistics.median(r[key] for r in rs) if rs else None

    def wrong(impl, n, mb):
        rs = results.get((impl, n, mb))
        return "-" if not rs else str(sum(r["wrong"] for r in rs))

    ours = [i for i in ("ring", "tree") if i in runnable]
    refs = [i for i in ("gloo", "mpi", "mpi-tcp") if i in runnable]
    cols = [i for i in runnable]
    head = ["ranks", "MiB"] + [f"{LABELS.get(i, i)} algbw / busbw" for i in cols]
    head += [f"ours / {LABELS[r]}" for r in refs] if ours else []
    rdma_refs = [r for r in ("ring-tcp", "ring-shm") if r in runnable] if "ring-rdma" in runnable else []
    head += [f"rdma / {r.split('-')[1]}" for r in rdma_refs]
    head += ["wrong elements (" + ", ".join(LABELS.get(i, i) for i in cols) + ")"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for n in nprocs:
        for mb in sizes:
            row = [str(n), str(mb)]
            for i in cols:
                row.append(f"{fmt(med(i, n, mb, 'algbw_gbs'))} / {fmt(med(i, n, mb, 'busbw_gbs'))}")
            if ours:
                best = max(ours, key=lambda i: med(i, n, mb, "algbw_gbs") or 0)
                b = med(best, n, mb, "algbw_gbs")
                for r in refs:
                    ref = med(r, n, mb, "algbw_gbs")
                    row.append(f"{b / ref:.2f}x ({best})" if b and ref else "-")
            for r in rdma_refs:
                x, ref = med("ring-rdma", n, mb, "algbw_gbs"), med(r, n, mb, "algbw_gbs")
                row.append(f"{x / ref:.2f}x" if x and ref else "-")
            row.append(", ".join(wrong(i, n, mb) for i in cols))
            lines.append("| " + " | ".join(row) + " |")

    print(f"Allreduce of f32 (in place, sum), GB/s = 1e9 bytes/s; medians over {a.rounds} rounds of each "
          f"run's median iteration; busbw = algbw * 2(n-1)/n. Machine: {os.cpu_count()} CPUs, "
          f"load average before the last run {os.getloadavg()[0]:.1f}. Wrong elements are summed over rounds, "
          f"iterations and ranks. 'ours' is the faster of strata ring and tree for that row.")
    print()
    print("\n".join(lines))
    if stopped_early:
        print(f"\n(stopped starting runs after --max-minutes {a.max_minutes}; some cells may be missing)")
    if failures:
        print("\nFailed runs:\n" + "\n".join("- " + f for f in failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
