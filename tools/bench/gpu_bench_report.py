#!/usr/bin/python3
"""The tables of tools/bench/run_gpu_bench.py, from its records (JSON lines:
"meta", "peak" and "row" records), so a run split over several commands
(--results FILE in each) is reported as one:

  python3 tools/bench/gpu_bench_report.py results.jsonl [more.jsonl ...]

Per task, model and precision: images/s (median over rounds of each run's
median), peak memory (the largest over rounds; the steady peak, over the
timed steps only, in the last column), MFU (nominal FLOPs,
tools/bench/model_flops.py, over the measured matmul peak of the precision),
the ratios with the targets of issue 11 marked, and the per-round
strata / eager ratios (rounds paired within a run)."""
import json
import statistics
import sys

from model_flops import gflop_per_image

IMPLS = ("strata", "pytorch-eager", "pytorch-compile")
# Not in the main table: strata training with every ViT block and VGG stage
# recomputed (strata_bench_train --recompute blocks), in a table of its own.
RECOMPUTE_IMPL = "strata-recompute"
# Not in the main table: strata training with the image blobs between
# convolutions stored NHWC (strata_bench_train --channels-last on), against
# strata's NCHW row: what decides whether channels_last becomes a default.
CHANNELS_LAST_IMPL = "strata-nhwc"
RECOMPUTE_TARGET = 0.5  # with every ViT block recomputed, at most half of PyTorch eager's peak
TASK_ORDER = {"train": 0, "infer": 1}
MODEL_ORDER = {"vgg16": 0, "vit_b16": 1, "cifar_vgg": 2}
PRECISION_ORDER = {"FP32": 0, "TF32": 1, "BF16": 2, "FP16": 3}
MODEL_NAMES = {"vgg16": "VGG-16", "vit_b16": "ViT-B/16", "cifar_vgg": "cifar_vgg"}
EAGER_TARGET = 1.1    # strata / PyTorch eager, every row
COMPILE_TARGET = 1.0  # strata / torch.compile, BF16 training of VGG-16 and ViT-B/16
MEMORY_TARGET = 1.0   # strata / PyTorch eager peak memory, at the same batch


def compile_target_applies(task, model, precision):
    return task == "train" and precision == "BF16" and model in ("vgg16", "vit_b16")


def load(paths):
    records = []
    for path in paths:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as e:
                    sys.exit(f"{path}:{n}: not a JSON record ({e}); a run cut short leaves a partial last line: "
                             "delete that line and report again")
    return records


def rate(v):
    if v is None:
        return "—"
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def mib(b):
    return "—" if not b else f"{b / 2**20:,.0f}"


def marked(ratio, target, better="higher"):
    """'1.23 (≥ 1.1)' or '0.61 (< 1.1)': the ratio and whether it meets the target."""
    if ratio is None:
        return "—"
    if better == "higher":
        return f"{ratio:.2f} ({'≥' if ratio >= target else '<'} {target:.1f})"
    return f"{ratio:.2f} ({'≤' if ratio <= target else '>'} {target:.1f})"


class Cell:
    """One implementation's measurements of one (task, model, precision)."""

    def __init__(self, rows):
        ok = [r for r in rows if "error" not in r]
        self.errors = [r["error"] for r in rows if "error" in r]
        self.ok = ok
        self.rate = statistics.median(r["samples_per_s"] for r in ok) if ok else None
        peaks = [r.get("peak_allocated_bytes") or 0 for r in ok]
        self.peak = max(peaks) if peaks else 0
        steady = [r.get("steady_peak_allocated_bytes") or 0 for r in ok]
        self.steady = max(steady) if steady else 0  # over the timed steps only (0: not recorded)
        firsts = [r["first_step_s"] for r in ok if "first_step_s" in r]
        self.first_step = statistics.median(firsts) if firsts else None
        self.batch = ok[0]["batch"] if ok else (rows[0].get("batch") if rows else None)
        self.by_round = {(r.get("run"), r.get("round")): r["samples_per_s"] for r in ok}

    def text(self):
        if self.rate is not None:
            return rate(self.rate)
        return "failed" if self.errors else "—"


def peaks_by_precision(records):
    by = {}
    for r in records:
        if r.get("kind") == "peak":
            by.setdefault(r["precision"], []).append(r["tflops"])
    return {p: statistics.median(v) for p, v in by.items()}


def mfu(cell, model, task, precision, peaks):
    flop = gflop_per_image(model, task)
    peak = peaks.get(precision)
    if cell.rate is None or flop is None or not peak:
        return "—"
    return f"{100 * cell.rate * flop / (peak * 1e3):.0f}%"


def version(v, scheme):
    """Library version integers as text: 'cuda' 13000 -> 13.0; 'cudnn' 91002 -> 9.10.2; 'cublas' 130001 -> 13.0.1."""
    if v in (None, "", 0):
        return "?"
    v = int(v)
    if scheme == "cuda":
        return f"{v // 1000}.{v % 1000 // 10}"
    if scheme == "cudnn" and v < 10000:  # cuDNN 8 and older: major * 1000 + minor * 100 + patch
        return f"{v // 1000}.{v % 1000 // 100}.{v % 100}"
    return f"{v // 10000}.{v % 10000 // 100}.{v % 100}"


def header(records, peaks):
    metas = [r for r in records if r.get("kind") == "meta"]
    out = []
    m = metas[0] if metas else {}
    dev = m.get("device", "?")
    if dev.startswith("cuda"):
        g = m.get("gpu_info", {})
        smi = m.get("nvidia_smi", {})
        mem = f"{g['memory_bytes'] / 2**30:.1f} GiB, " if g.get("memory_bytes") else ""
        out.append(f"GPU: {smi.get('name') or g.get('gpu', '?')} ({mem}sm {g.get('sm', '?')}), driver "
                   f"{smi.get('driver', '?')} (CUDA driver API {version(g.get('cuda_driver'), 'cuda')})")
        out.append(f"strata: CUDA runtime {version(g.get('cuda_runtime'), 'cuda')}, cuBLAS "
                   f"{version(g.get('cublas'), 'cublas')}, cuDNN {version(g.get('cudnn'), 'cudnn')}, commit "
                   f"{m.get('commit', '?')}")
    else:
        out.append(f"CPU: {m.get('cpu', '?')}, {m.get('threads', '?')} threads; strata commit {m.get('commit', '?')}")
    t = m.get("torch", {})
    if t:
        cudnn = f", cuDNN {version(t['cudnn'], 'cudnn')}" if t.get("cudnn") else ""
        out.append(f"PyTorch {t.get('torch', '?')} (CUDA {t.get('torch_cuda') or 'none'}{cudnn}), "
                   f"interpreter {m.get('python', '?')}")
    if peaks:
        what = "cuBLAS 8192^3 GEMM" if dev.startswith("cuda") else "strata SGEMM 1024^3"
        out.append(f"matmul peak ({what}, median): " +
                   ", ".join(f"{p} {peaks[p]:.1f} TFLOP/s" if peaks[p] >= 1 else f"{p} {peaks[p] * 1e3:.0f} GFLOP/s"
                             for p in sorted(peaks, key=lambda p: PRECISION_ORDER.get(p, 9))))
    if m:
        names = {"strata": "strata", "pytorch-eager": "PyTorch eager", "pytorch-compile": "torch.compile"}
        impls = ", ".join(names.get(i, i) for i in m.get("impls", IMPLS))
        out.append(f"settings: {m.get('rounds')} round(s) alternating {impls}; "
                   f"per program and round {m.get('repeats')} timed runs of {m.get('iters')} steps after "
                   f"{m.get('warmup')} warm-up steps (median); date {m.get('date', '?')}")
    for note in dict.fromkeys(n for mm in metas for n in mm.get("notes", [])):
        out.append(f"note: {note}")
    for cmd in dict.fromkeys(mm.get("command") for mm in metas if mm.get("command")):
        out.append(f"command: {cmd}")
    return out


def throughput_table(records, peaks):
    rows = [r for r in records if r.get("kind") == "row" and r.get("task") in TASK_ORDER]
    groups = {}
    for r in rows:
        groups.setdefault((r["task"], r["model"], r["precision"]), {}).setdefault(r["impl"], []).append(r)
    keys = sorted(groups, key=lambda k: (TASK_ORDER[k[0]], MODEL_ORDER.get(k[1], 9), PRECISION_ORDER.get(k[2], 9)))
    out = ["| task | model | batch | precision | strata img/s | PyTorch eager img/s | torch.compile img/s | "
           "strata / eager | strata / compile | peak MiB strata / eager / compile | memory strata / eager | "
           "MFU strata / eager / compile | compile + first step s | per-round strata / eager | "
           "steady peak MiB strata / eager |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    misses, met = [], 0
    for task, model, precision in keys:
        c = {impl: Cell(groups[(task, model, precision)].get(impl, [])) for impl in IMPLS}
        s, e, k = c["strata"], c["pytorch-eager"], c["pytorch-compile"]
        name = f"{MODEL_NAMES.get(model, model)} {precision} {task}"
        r_eager = s.rate / e.rate if s.rate and e.rate else None
        r_compile = s.rate / k.rate if s.rate and k.rate else None
        r_mem = s.peak / e.peak if s.peak and e.peak else None
        eager_cell = marked(r_eager, EAGER_TARGET)
        if r_eager is not None:
            met += r_eager >= EAGER_TARGET
            if r_eager < EAGER_TARGET:
                misses.append(f"{name}: strata / eager {r_eager:.2f} < {EAGER_TARGET:.1f}")
        if compile_target_applies(task, model, precision):
            compile_cell = marked(r_compile, COMPILE_TARGET)
            if r_compile is not None:
                met += r_compile >= COMPILE_TARGET
                if r_compile < COMPILE_TARGET:
                    misses.append(f"{name}: strata / compile {r_compile:.2f} < {COMPILE_TARGET:.1f}")
        else:
            compile_cell = "—" if r_compile is None else f"{r_compile:.2f}"
        mem_cell = marked(r_mem, MEMORY_TARGET, better="lower")
        if r_mem is not None:
            met += r_mem <= MEMORY_TARGET
            if r_mem > MEMORY_TARGET:
                misses.append(f"{name}: peak memory strata / eager {r_mem:.2f} > {MEMORY_TARGET:.1f}")
        rounds = [s.by_round[key] / e.by_round[key] for key in s.by_round if key in e.by_round]
        batch = s.batch or e.batch or k.batch
        out.append(
            f"| {task} | {MODEL_NAMES.get(model, model)} | {batch} | {precision} | {s.text()} | {e.text()} | "
            f"{k.text()} | {eager_cell} | {compile_cell} | {mib(s.peak)} / {mib(e.peak)} / {mib(k.peak)} | "
            f"{mem_cell} | {mfu(s, model, task, precision, peaks)} / {mfu(e, model, task, precision, peaks)} / "
            f"{mfu(k, model, task, precision, peaks)} | "
            f"{'—' if k.first_step is None else f'{k.first_step:.1f}'} | "
            f"{', '.join(f'{x:.2f}' for x in rounds) or '—'} | "
            f"{mib(s.steady)} / {mib(e.steady)} |")
    failures = [f"{MODEL_NAMES.get(m, m)} {p} {t}, {impl}: {err}" for (t, m, p), g in sorted(groups.items())
                for impl, rs in g.items() for err in dict.fromkeys(r["error"] for r in rs if "error" in r)]
    return out, met, misses, failures


def embed_table(records):
    rows = [r for r in records if r.get("kind") == "row" and r.get("task") == "embed"]
    if not rows:
        return []
    eager = {}
    for r in records:
        if r.get("kind") == "row" and r.get("task") == "infer" and r.get("impl") == "pytorch-eager" and \
                r.get("precision") == "FP32" and "error" not in r:
            eager.setdefault(r["model"], []).append(r["samples_per_s"])
    by_model = {}
    for r in rows:
        by_model.setdefault(r["model"], []).append(r)
    out = ["| model | inputs | batch | strata embed img/s, end to end (start-up included) | "
           "strata embed img/s, streaming (first batch to last row) | wall s | strata peak MiB | "
           "PyTorch eager FP32 steady-state img/s (same run) |",
           "|---|---|---|---|---|---|---|---|"]
    for model in sorted(by_model, key=lambda m: MODEL_ORDER.get(m, 9)):
        c = Cell(by_model[model])
        ok = c.ok
        inputs = ok[0]["inputs"] if ok else by_model[model][0].get("inputs", "?")
        stream = statistics.median(r["streaming_per_s"] for r in ok) if ok else None
        wall = statistics.median(r["wall_s"] for r in ok) if ok else None
        ref = statistics.median(eager[model]) if model in eager else None
        out.append(f"| {MODEL_NAMES.get(model, model)} | {inputs} | {c.batch} | {c.text()} | {rate(stream)} | "
                   f"{'—' if wall is None else f'{wall:.1f}'} | {mib(c.peak)} | {rate(ref)} |")
    return out


def recompute_table(records):
    """Training with every block recomputed against strata without and PyTorch eager: speed and peak memory."""
    groups = {}
    for r in records:
        if r.get("kind") == "row" and r.get("task") == "train":
            groups.setdefault((r["model"], r["precision"]), {}).setdefault(r["impl"], []).append(r)
    keys = sorted((k for k, g in groups.items() if RECOMPUTE_IMPL in g),
                  key=lambda k: (MODEL_ORDER.get(k[0], 9), PRECISION_ORDER.get(k[1], 9)))
    if not keys:
        return [], 0, []
    out = ["| model | precision | recomputed img/s | strata img/s | PyTorch eager img/s | recomputed / strata speed | "
           "peak MiB recomputed / strata / eager | memory recomputed / eager |",
           "|---|---|---|---|---|---|---|---|"]
    met, misses = 0, []
    for model, precision in keys:
        g = groups[(model, precision)]
        rc, s, e = Cell(g[RECOMPUTE_IMPL]), Cell(g.get("strata", [])), Cell(g.get("pytorch-eager", []))
        speed = f"{rc.rate / s.rate:.2f}" if rc.rate and s.rate else "—"
        r_mem = rc.peak / e.peak if rc.peak and e.peak else None
        if model == "vit_b16":
            mem_cell = marked(r_mem, RECOMPUTE_TARGET, better="lower")
            if r_mem is not None:
                met += r_mem <= RECOMPUTE_TARGET
                if r_mem > RECOMPUTE_TARGET:
                    misses.append(f"{MODEL_NAMES[model]} {precision} train, every block recomputed: peak memory "
                                  f"strata / eager {r_mem:.2f} > {RECOMPUTE_TARGET:.1f}")
        else:
            mem_cell = "—" if r_mem is None else f"{r_mem:.2f}"
        out.append(f"| {MODEL_NAMES.get(model, model)} | {precision} | {rc.text()} | {s.text()} | {e.text()} | "
                   f"{speed} | {mib(rc.peak)} / {mib(s.peak)} / {mib(e.peak)} | {mem_cell} |")
    return out, met, misses


def channels_last_table(records):
    """Training with NHWC blobs between the convolutions against strata's NCHW: speed and peak memory."""
    groups = {}
    for r in records:
        if r.get("kind") == "row" and r.get("task") == "train":
            groups.setdefault((r["model"], r["precision"]), {}).setdefault(r["impl"], []).append(r)
    keys = sorted((k for k, g in groups.items() if CHANNELS_LAST_IMPL in g),
                  key=lambda k: (MODEL_ORDER.get(k[0], 9), PRECISION_ORDER.get(k[1], 9)))
    out = []
    if keys:
        out = ["| model | precision | NHWC img/s | NCHW img/s | NHWC / NCHW speed | peak MiB NHWC / NCHW |",
               "|---|---|---|---|---|---|"]
    for model, precision in keys:
        g = groups[(model, precision)]
        n, s = Cell(g[CHANNELS_LAST_IMPL]), Cell(g.get("strata", []))
        speed = f"{n.rate / s.rate:.2f}" if n.rate and s.rate else "—"
        out.append(f"| {MODEL_NAMES.get(model, model)} | {precision} | {n.text()} | {s.text()} | {speed} | "
                   f"{mib(n.peak)} / {mib(s.peak)} |")
    return out


def report(records):
    peaks = peaks_by_precision(records)
    lines = header(records, peaks)
    table, met, misses, failures = throughput_table(records, peaks)
    lines += ["", *table]
    channels_last = channels_last_table(records)
    if channels_last:
        lines += ["", "Training with the image blobs between convolutions stored NHWC (`strata_bench_train "
                  "--channels-last on`) against strata's NCHW:", "", *channels_last]
    recompute, recompute_met, recompute_misses = recompute_table(records)
    if recompute:
        lines += ["", "Training with every ViT block and VGG stage recomputed (`strata_bench_train --recompute "
                  "blocks`):", "", *recompute]
        met += recompute_met
        misses += recompute_misses
    embed = embed_table(records)
    if embed:
        lines += ["", "`strata embed --input` (FP32: embed has no precision setting), against PyTorch eager's "
                  "steady-state forward:", "", *embed]
    lines += ["", f"targets met: {met}; missed: {len(misses)}"]
    lines += [f"- {m}" for m in misses]
    if failures:
        lines += ["", "failed runs (their cells say 'failed'):"] + [f"- {f}" for f in failures]
    return "\n".join(lines)


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: gpu_bench_report.py RESULTS.jsonl [MORE.jsonl ...] (written by run_gpu_bench.py --results)")
    print(report(load(sys.argv[1:])))


if __name__ == "__main__":
    main()
