#!/usr/bin/python3
"""Pipeline- and tensor-parallel training benchmark for docs/benchmarks.md.

For cifar_vgg and vit_ti16 on synthetic data (an Input layer of zeros in
place of the data layer, so no dataset is needed), trains each split with
`strata train` (multi-rank splits under `strata launch`) and prints markdown
tables of:
  - the pipeline bubble: each stage's measured idle share of a step (1 -
    compute / step, from the "pipeline stage s: ..." line strata train prints
    at the end of a pipelined run) against the theoretical (P-1)/(M+P-1);
  - images/s (from the JSON log's time_s of the timed iterations: after
    --warmup iterations) and each rank's tensor storage in use at the end of
    the run (parameters, gradients, optimizer state, activations and
    buffers: the steady state) and its peak ("rank r: peak tensor storage
    ..., in use at the end ...", printed at the end of the run; the peak
    includes start-up, e.g. the full initial weights a tensor-parallel rank
    builds before keeping its block).

Splits (every rank is a process with --threads 1 by default):
  unsplit   1 process, batch b, iter_size M
  unsplit-T 1 process with T threads (T = the ranks of the other splits), same
  pp2       2 stages, batch b per micro-batch, M micro-batches (stages cut at
            --cifar-cut / --vit-cut, given as `stage: 1` on that layer)
  tp2       2 tensor-parallel ranks: convolutions OUTPUT_CHANNELS, fc COLUMN
            then ROW (cifar_vgg: fc1 COLUMN, fc2 ROW; vit_ti16: each block's
            fc1 COLUMN, fc2 ROW; its 3 attention heads do not divide by 2, so
            attention stays replicated), batch b, iter_size M
  dp2       2 data-parallel ranks, batch b, iter_size max(1, M/2) (reference;
            with M = 1 its step is 2b images)
Every split trains on b x M images per step (dp2 with M = 1: 2b).

  /usr/bin/python3 tools/bench/run_pipeline_bench.py --build build
  /usr/bin/python3 tools/bench/run_pipeline_bench.py --build build --smoke   # tiny, seconds

The nets it generates are written to --workdir (default: a temporary folder)
and kept with --keep. On a machine with a GPU, `--device cuda` runs the
unsplit rows on the GPU (pipelines and tensor-parallel groups run on CPU
processes only so far; their rows are skipped there)."""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def layer_blocks(text):
    """Splits a net prototxt into (head text, [top-level `layer { }` block texts])."""
    blocks, head, i = [], "", 0
    while True:
        m = re.search(r"^layer\s*\{", text[i:], re.M)
        if not m:
            head += text[i:]
            break
        start = i + m.start()
        head += text[i:start] if not blocks else ""
        depth, j = 0, start
        while True:
            c = text[j]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        blocks.append(text[start:j + 1])
        i = j + 1
    return head, blocks


def block_field(block, key):
    m = re.search(r'\b%s:\s*"([^"]*)"' % key, block)
    return m.group(1) if m else None


def input_layer(batch, chw):
    dims = " ".join("dim: %d" % d for d in (batch,) + chw)
    return ('layer {\n  name: "data"  type: "Input"  top: "data"  top: "label"\n'
            '  input_param { shape { %s } shape { dim: %d } }\n}' % (dims, batch))


def synthetic_net(model, batch, split, cut, vit_blocks):
    """The TRAIN net of models/<model> with an Input layer of zeros for its data
    layer, TEST-only layers dropped; split: "pp" adds `stage: 1` at `cut`,
    "tp" adds the tensor-parallel `split` keys."""
    src = os.path.join(ROOT, "models", model, "train.prototxt" if model == "cifar_vgg" else "finetune.prototxt")
    with open(src) as f:
        head, blocks = layer_blocks(f.read())
    out = []
    for b in blocks:
        t = block_field(b, "type")
        name = block_field(b, "name")
        if re.search(r"phase:\s*TEST", b):
            continue
        if t in ("Cifar10Data", "ImageData", "ArrayData", "MnistData"):
            out.append(input_layer(batch, (3, 32, 32) if model == "cifar_vgg" else (3, 224, 224)))
            continue
        b = re.sub(r"\s*reinit:\s*true", "", b)
        b = re.sub(r"\s*include\s*\{\s*phase:\s*TRAIN\s*\}", "", b)
        m = re.match(r"block(\d+)_", name or "")
        if model == "vit_ti16" and m and int(m.group(1)) >= vit_blocks:
            continue
        if model == "vit_ti16" and name == "ln" and vit_blocks < 12:
            b = b.replace('bottom: "block11_add2"', 'bottom: "block%d_add2"' % (vit_blocks - 1))
        if split == "pp" and name == cut:
            b = b.replace('name: "%s"' % cut, 'name: "%s"  stage: 1' % cut, 1)
        if split == "tp":
            if t == "Convolution":
                b = b.replace("convolution_param {", "convolution_param { split: OUTPUT_CHANNELS", 1)
            elif t == "InnerProduct":
                kind = {"fc1": "COLUMN", "fc2": "ROW"}.get(name) or \
                       ("COLUMN" if name.endswith("_fc1") else "ROW" if name.endswith("_fc2") else None)
                if kind:
                    b = b.replace("inner_product_param {", "inner_product_param { split: %s" % kind, 1)
        out.append(b)
    if split == "pp" and not any('stage: 1' in b for b in out):
        sys.exit("run_pipeline_bench: no layer '%s' in %s to start stage 1 at" % (cut, model))
    return head.strip() + "\n" + "\n".join(out) + "\n"


def solver_text(net, iters, iter_size, prefix):
    return "\n".join([
        'net: "%s"' % net, 'type: "SGD"', "base_lr: 0.001", "momentum: 0.9", 'lr_policy: "fixed"',
        "max_iter: %d" % iters, "iter_size: %d" % iter_size, "display: 1", "test_interval: 0",
        "snapshot: 0", "snapshot_after_train: false", 'snapshot_prefix: "%s"' % prefix, "random_seed: 1", ""])


MIB = {"B": 1 / 2**20, "KiB": 1 / 1024, "MiB": 1.0, "GiB": 1024.0}


def parse_run(out, log_path, warmup, images_per_step):
    """images/s, {rank: peak MiB}, {stage: (idle, theory, step ms)} from a run's output and log."""
    times = []
    with open(log_path) as f:
        for line in f:
            e = json.loads(line)
            if e.get("event") == "iteration":
                times.append((int(e["iter"]), float(e["time_s"])))
    timed = [t for t in times if t[0] >= warmup]
    ips = None
    if len(timed) >= 2:
        ips = images_per_step * (timed[-1][0] - timed[0][0]) / (timed[-1][1] - timed[0][1])
    mem, stages = {}, {}
    for line in out.splitlines():
        m = re.search(r"rank (\d+): peak tensor storage ([\d.]+) (B|KiB|MiB|GiB), "
                      r"in use at the end ([\d.]+) (B|KiB|MiB|GiB)", line)
        if m:
            mem[int(m.group(1))] = (float(m.group(2)) * MIB[m.group(3)], float(m.group(4)) * MIB[m.group(5)])
        m = re.search(r"pipeline stage (\d+): (\d+) timed steps, step ([\d.]+) ms, compute ([\d.]+) ms, "
                      r"idle ([\d.]+)% \(theory ([\d.]+)%\)", line)
        if m:
            stages[int(m.group(1))] = (float(m.group(5)), float(m.group(6)), float(m.group(3)))
    return ips, mem, stages


def run(cmd, timeout):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        out, _ = p.communicate()
        return None, out + "\n(killed after %d s)" % timeout
    return p.returncode, out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="CMake build folder holding the strata binary")
    ap.add_argument("--models", default="cifar_vgg,vit_ti16")
    ap.add_argument("--splits", default="unsplit,unsplit-T,pp2,tp2,dp2")
    ap.add_argument("--micro-batches", default="1,2,4,8", help="M values")
    ap.add_argument("--cifar-batch", type=int, default=32, help="cifar_vgg images per micro-batch")
    ap.add_argument("--vit-batch", type=int, default=8, help="vit_ti16 images per micro-batch")
    ap.add_argument("--vit-blocks", type=int, default=12, help="vit_ti16 encoder blocks kept (12 = the model)")
    ap.add_argument("--cifar-cut", default="conv2_2", help="first layer of stage 1 for pp2")
    ap.add_argument("--vit-cut", default="block6_ln1", help="first layer of stage 1 for pp2")
    ap.add_argument("--schedule", default="1f1b", choices=["1f1b", "gpipe"])
    ap.add_argument("--iters", type=int, default=12, help="iterations per run, warm-up included")
    ap.add_argument("--warmup", type=int, default=2, help="iterations not timed")
    ap.add_argument("--threads", type=int, default=1, help="threads per rank")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda for the unsplit rows on a GPU")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per run")
    ap.add_argument("--workdir", default="")
    ap.add_argument("--keep", action="store_true", help="keep the generated nets and logs")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny settings to check the program: batch 2, 2 ViT blocks, M 1 and 2, 4 iterations")
    a = ap.parse_args()
    if a.smoke:
        a.cifar_batch, a.vit_batch, a.vit_blocks, a.iters, a.warmup = 2, 1, 2, 4, 1
        a.micro_batches, a.vit_cut = "1,2", "block1_ln1"
    strata = os.path.abspath(os.path.join(a.build, "strata"))
    if not os.path.exists(strata):
        sys.exit("run_pipeline_bench: %s not found (build the strata target)" % strata)
    work = a.workdir or tempfile.mkdtemp(prefix="strata_pipeline_bench_")
    os.makedirs(work, exist_ok=True)
    ranks = 2
    load = os.getloadavg()
    print("<!-- %s, %d cores, load average %.1f %.1f %.1f at start, %s -->" % (
        time.strftime("%Y-%m-%d %H:%M"), os.cpu_count(), load[0], load[1], load[2], " ".join(sys.argv[1:])))
    for model in a.models.split(","):
        batch = a.cifar_batch if model == "cifar_vgg" else a.vit_batch
        cut = a.cifar_cut if model == "cifar_vgg" else a.vit_cut
        rows, bubble = [], []
        for M in [int(x) for x in a.micro_batches.split(",")]:
            for split in a.splits.split(","):
                if a.device != "cpu" and split not in ("unsplit",):
                    continue
                kind = {"pp2": "pp", "tp2": "tp"}.get(split, "")
                name = "%s_%s_m%d" % (model, split, M)
                net = os.path.join(work, name + ".prototxt")
                with open(net, "w") as f:
                    f.write(synthetic_net(model, batch, kind, cut, a.vit_blocks))
                iter_size = 1 if split == "pp2" else (max(1, M // 2) if split == "dp2" else M)
                solver = os.path.join(work, name + "_solver.prototxt")
                with open(solver, "w") as f:
                    f.write(solver_text(net, a.iters, iter_size, os.path.join(work, name, "run")))
                threads = a.threads * ranks if split == "unsplit-T" else a.threads
                # --overwrite: repeats of a case reuse its snapshot prefix
                train = [strata, "train", "--solver", solver, "--overwrite", "--threads", str(threads), "--device", a.device]
                if split == "pp2":
                    train += ["--pp", "2", "--micro-batches", str(M), "--schedule", a.schedule]
                if split == "tp2":
                    train += ["--tp", "2"]
                cmd = train if split.startswith("unsplit") else [strata, "launch", "--nproc", str(ranks), "--"] + train
                t0 = time.time()
                rc, out = run(cmd, a.timeout)
                wall = time.time() - t0
                images = batch * M if split != "dp2" else batch * iter_size * ranks
                label = {"unsplit-T": "unsplit, %d threads" % threads}.get(split, split)
                if rc != 0:
                    print("<!-- %s M=%d failed (%s): %s -->" % (split, M, rc, out.strip()[-800:]), flush=True)
                    rows.append((M, label, images, None, {}, wall))
                    continue
                ips, mem, stages = parse_run(out, os.path.join(work, name, "run_log.jsonl"), a.warmup, images)
                rows.append((M, label, images, ips, mem, wall))
                for s in sorted(stages):
                    bubble.append((M, s) + stages[s])
                print("<!-- done %s M=%d in %.0f s -->" % (split, M, wall), flush=True)
        print("\n%s (%s, %d images per micro-batch%s), %d iterations (%d timed), %s, %d thread(s) per rank:\n" % (
            model, a.device, batch, ", %d blocks" % a.vit_blocks if model == "vit_ti16" and a.vit_blocks != 12 else "",
            a.iters, a.iters - a.warmup, a.schedule, a.threads))
        if bubble:
            print("| M | stage | step ms | measured idle | theory (P-1)/(M+P-1) |")
            print("|---|---|---|---|---|")
            for M, s, idle, theory, step in bubble:
                print("| %d | %d | %.1f | %.1f%% | %.1f%% |" % (M, s, step, idle, theory))
            print()
        print("| M | split | images/step | images/s | vs unsplit | tensor storage per rank at the end (MiB) "
              "| peak per rank (MiB) |")
        print("|---|---|---|---|---|---|---|")
        base = {M: ips for M, label, _, ips, _, _ in rows if label == "unsplit"}
        for M, label, images, ips, mem, _ in rows:
            rel = "%.2fx" % (ips / base[M]) if ips and base.get(M) else ""
            end = " / ".join("%.1f" % mem[r][1] for r in sorted(mem)) or "-"
            peak = " / ".join("%.1f" % mem[r][0] for r in sorted(mem)) or "-"
            print("| %d | %s | %d | %s | %s | %s | %s |" % (M, label, images, "%.1f" % ips if ips else "failed", rel,
                                                         end, peak))
        sys.stdout.flush()
    if not a.keep and not a.workdir:
        shutil.rmtree(work, ignore_errors=True)
    elif a.keep:
        print("<!-- nets and logs kept in %s -->" % work)


if __name__ == "__main__":
    main()
