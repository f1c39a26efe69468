#!/usr/bin/python3
"""strata against PyTorch eager and torch.compile on one GPU, in the same run,
alternating the programs: training of VGG-16 (batch 64, 224x224), ViT-B/16
(batch 64) and cifar_vgg (batch 128, 32x32); inference of VGG-16 and
ViT-B/16 (batch 64), steady-state and through `strata embed`; in FP32, TF32,
BF16 and FP16. Prints the GPU, driver and library versions, the command and
a markdown table for docs/benchmarks.md (images/s, peak memory, MFU, ratios
with the targets marked).

  cmake --build build -j --target strata strata_bench_train strata_bench_infer strata_bench_gpu_gemm
  python3 tools/bench/run_gpu_bench.py --build build --results gpu.jsonl

Programs (one process per implementation, task and precision, so each has
the GPU to itself and its own peak memory):
  strata         build/strata_bench_train, build/strata_bench_infer
  PyTorch        tools/bench/torch_throughput.py under --python (default: this
                 interpreter), eager and --compile
  strata embed   build/strata embed --input (256 synthetic inputs, weights
                 written by strata_bench_infer --save-weights), timed whole
  matmul peak    build/strata_bench_gpu_gemm (CPU: strata_bench_sgemm)

Every record (versions, peaks, each measurement) is appended to --results as
it is made, so a long run can be split into several commands (e.g. one per
precision) and reported as one with tools/bench/gpu_bench_report.py or
--report. A program that fails or times out leaves a 'failed' cell and the
rest goes on.

The check that fits a short GPU lease (VGG-16 and ViT-B/16 training, FP32
and BF16, against PyTorch eager, one round; about 2 minutes on an H100):
  python3 tools/bench/run_gpu_bench.py --build build --quick

Check on a machine without a GPU (seconds; the PyTorch side needs torch):
  /usr/bin/python3 tools/bench/run_gpu_bench.py --build build --device cpu \\
      --models cifar_vgg --precisions FP32 --rounds 1 --iters 2"""
import argparse
import array
import datetime
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import gpu_bench_report  # noqa: E402

TRAIN_MODELS = ("vgg16", "vit_b16", "cifar_vgg")
INFER_MODELS = ("vgg16", "vit_b16")
EMBED_LAYER = {"vgg16": "fc8", "vit_b16": "head"}  # the logits: the same work as the forward-only rows
PRECISIONS = ("FP32", "TF32", "BF16", "FP16")


class Recorder:
    """Keeps the records and appends each to --results as it comes."""

    def __init__(self, path):
        self.records = []
        self.path = path

    def add(self, record):
        self.records.append(record)
        if self.path:
            with open(self.path, "a") as f:
                f.write(json.dumps(record) + "\n")


def run_program(cmd, timeout, what):
    """(returncode or None on timeout, stdout, stderr, seconds)."""
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr, time.perf_counter() - t0
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        print(f"{what}: timed out after {timeout} s (raise --timeout or lower --iters)", file=sys.stderr)
        return None, out, err, time.perf_counter() - t0
    except OSError as e:
        return 127, "", f"cannot run {cmd[0]}: {e}", time.perf_counter() - t0


def failure_reason(rc, stderr, timeout):
    if rc is None:
        return f"timed out after {timeout} s"
    last = [line for line in stderr.strip().splitlines() if line.strip()]
    return f"exit {rc}: {last[-1][:200] if last else 'no message'}"


def json_lines(text):
    rows = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return rows


def measure(rec, a, cmd, impl, task, precision, models, round_id, what):
    """Runs one program over `models`; a row per model, 'error' rows for those it did not report."""
    rc, out, err, _ = run_program(cmd, a.timeout, what)
    got = {}
    for row in json_lines(out):
        if "model" in row:
            got[row["model"]] = row
    if rc != 0:
        print(f"{what} failed ({failure_reason(rc, err, a.timeout)}); command: {shlex.join(cmd)}\n"
              f"{err[-3000:]}", file=sys.stderr)
    for m in models:
        row = dict(got.get(m) or {"model": m, "error": failure_reason(rc, err, a.timeout) if rc != 0 else
                                  "the program printed no row for this model"})
        row.update({"kind": "row", "run": a.run_id, "round": round_id, "impl": impl, "task": task,
                    "precision": precision})
        rec.add(row)


def write_npy_inputs(path, n, shape=(3, 224, 224)):
    """n float32 inputs as a .npy (format 1.0), without numpy: one image of
    smooth values written n times (the values do not change the work)."""
    per = shape[0] * shape[1] * shape[2]
    img = array.array("f", ((i * 7919) % 1000 / 500.0 - 1.0 for i in range(per)))
    head = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d, %d, %d), }" % ((n,) + tuple(shape))
    head += " " * ((64 - (10 + len(head) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head.encode("latin1"))
        for _ in range(n):
            img.tofile(f)


def run_embed(rec, a, model, weights, inputs, round_id, tmp):
    cmd = [os.path.join(a.build, "strata"), "embed", "--model", os.path.join(ROOT, "models", model, "deploy.prototxt"),
           "--weights", weights, "--weights-format", "strata", "--layer", EMBED_LAYER[model], "--input", inputs,
           "--out", os.path.join(tmp, f"{model}_rows.npy"), "--batch", str(a.embed_batch), "--device", a.device,
           "--threads", str(a.threads)]
    rc, out, err, wall = run_program(cmd, a.timeout, f"strata embed {model}")
    row = {"kind": "row", "run": a.run_id, "round": round_id, "impl": "strata", "task": "embed", "model": model,
           "precision": "FP32", "batch": a.embed_batch, "inputs": a.embed_inputs}
    if rc != 0:
        print(f"strata embed {model} failed ({failure_reason(rc, err, a.timeout)}); command: {shlex.join(cmd)}\n"
              f"{err[-3000:]}", file=sys.stderr)
        row["error"] = failure_reason(rc, err, a.timeout)
    else:
        streams = re.findall(r"\d+/\d+ images\s+([0-9.]+) images/s", err)
        peak = re.search(r"peak GPU memory: ([0-9.]+) MiB", out)
        row.update({"samples_per_s": a.embed_inputs / wall, "wall_s": wall,
                    "streaming_per_s": float(streams[-1]) if streams else None,
                    "peak_allocated_bytes": int(float(peak.group(1)) * 2**20) if peak else 0})
    rec.add(row)


def machine_info(a, on_gpu):
    info = {"kind": "meta", "device": a.device, "date": datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M UTC"), "command": shlex.join([sys.executable, os.path.relpath(__file__, ROOT)] + sys.argv[1:]),
        "python": a.python, "threads": a.threads, "rounds": a.rounds, "iters": a.iters, "warmup": a.warmup,
        "repeats": a.repeats, "notes": []}
    rc, out, _, _ = run_program(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], 30, "git")
    info["commit"] = out.strip() if rc == 0 else "unknown (no git checkout)"
    try:
        with open("/proc/cpuinfo") as f:
            names = re.findall(r"^model name\s*:\s*(.+)$", f.read(), re.M)
        info["cpu"] = f"{names[0]} ({len(names)} CPUs)" if names else "unknown"
    except OSError:
        info["cpu"] = "unknown"
    rc, out, err, _ = run_program([a.python, os.path.join(HERE, "torch_throughput.py"), "--versions"], 120, "torch")
    info["torch"] = json_lines(out)[0] if rc == 0 and json_lines(out) else {}
    if rc != 0:
        info["notes"].append(f"PyTorch not usable with {a.python}: {failure_reason(rc, err, 120)}")
    if on_gpu:
        rc, out, _, _ = run_program(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], 60,
                                    "nvidia-smi")
        if rc == 0 and out.strip():
            index = int(a.device.split(":")[1]) if ":" in a.device else 0
            lines = out.strip().splitlines()
            name, driver = (x.strip() for x in lines[min(index, len(lines) - 1)].split(",", 1))
            info["nvidia_smi"] = {"name": name, "driver": driver}
    return info


def measure_peaks(rec, a, on_gpu, meta):
    if on_gpu:
        cmd = [os.path.join(a.build, "strata_bench_gpu_gemm")]
        rc, out, err, _ = run_program(cmd, a.timeout, "strata_bench_gpu_gemm")
        if rc != 0:
            sys.exit(f"strata_bench_gpu_gemm failed ({failure_reason(rc, err, a.timeout)}): build it with "
                     f"`cmake --build {a.build} --target strata_bench_gpu_gemm` on a machine with a GPU")
        for row in json_lines(out):
            if "gpu" in row:
                meta["gpu_info"] = row
        rec.add(meta)
        for row in json_lines(out):
            if "mode" in row:
                rec.add({"kind": "peak", "precision": row["mode"], "tflops": row["tflops_median"],
                         "what": f"cuBLAS {row['size']}^3"})
    else:
        rec.add(meta)
        cmd = [os.path.join(a.build, "strata_bench_sgemm"), str(a.threads), "1024"]
        rc, out, err, _ = run_program(cmd, a.timeout, "strata_bench_sgemm")
        if rc != 0:
            sys.exit(f"strata_bench_sgemm failed ({failure_reason(rc, err, a.timeout)}): build it with "
                     f"`cmake --build {a.build} --target strata_bench_sgemm`")
        rec.add({"kind": "peak", "precision": "FP32", "tflops": json_lines(out)[0]["gflops_median"] / 1e3,
                 "what": "strata SGEMM 1024^3"})


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build", help="the build folder with strata and the bench programs")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (a check of the program: FP32 only)")
    p.add_argument("--models", default="vgg16,vit_b16,cifar_vgg",
                   help="training: vgg16, vit_b16, cifar_vgg; inference and embed: vgg16, vit_b16")
    p.add_argument("--tasks", default="train,infer,embed")
    p.add_argument("--precisions", default=None, help="default FP32,TF32,BF16,FP16 on a GPU, FP32 on the CPU")
    p.add_argument("--impls", default="strata,strata-nhwc,pytorch-eager,pytorch-compile",
                   help="strata-nhwc: training with channels_last (a table of its own); add strata-recompute for "
                        "training with every ViT block and VGG stage recomputed")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--iters", type=int, default=20, help="steps per timed run")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps before the timed runs")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per program (their median is its result)")
    p.add_argument("--batch", type=int, default=0,
                   help="every model's batch in both programs (default: each model's own, as in the table)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: 2 on the CPU, all on a GPU)")
    p.add_argument("--python", default=sys.executable, help="the interpreter with PyTorch (default: this one)")
    p.add_argument("--embed-inputs", type=int, default=256)
    p.add_argument("--embed-batch", type=int, default=64)
    p.add_argument("--timeout", type=int, default=900, help="seconds one program may take")
    p.add_argument("--results", help="append every record (JSON lines) to this file")
    p.add_argument("--report", nargs="+", metavar="RESULTS", help="print the tables of these files; run nothing")
    p.add_argument("--quick", action="store_true",
                   help="the check that fits a short GPU lease (about 2 minutes on an H100): VGG-16 and ViT-B/16 "
                        "training in FP32 and BF16, strata (NCHW and NHWC) against PyTorch eager, one round of 8 steps after 3 "
                        "(flags given as well override it)")
    a = p.parse_args()
    if a.quick:
        given = set(arg.split("=")[0] for arg in sys.argv[1:])
        for flag, value in (("--models", "vgg16,vit_b16"), ("--tasks", "train"), ("--precisions", "FP32,BF16"),
                            ("--impls", "strata,strata-nhwc,pytorch-eager"), ("--rounds", 1), ("--iters", 8), ("--warmup", 3),
                            ("--repeats", 1), ("--timeout", 150)):
            if flag not in given:
                setattr(a, flag[2:].replace("-", "_"), value)
    a.on_gpu = a.device.startswith("cuda")
    if a.threads is None:
        a.threads = os.cpu_count() if a.on_gpu else 2
    if a.precisions is None:
        a.precisions = ",".join(PRECISIONS) if a.on_gpu else "FP32"
    for flag, value, known in (("--precisions", a.precisions, PRECISIONS),
                               ("--tasks", a.tasks, ("train", "infer", "embed")),
                               ("--impls", a.impls, gpu_bench_report.IMPLS + (gpu_bench_report.RECOMPUTE_IMPL,
                                                                              gpu_bench_report.CHANNELS_LAST_IMPL)),
                               ("--models", a.models, TRAIN_MODELS)):
        for v in value.split(","):
            if v not in known:
                p.error(f"{flag}: unknown '{v}' (known: {', '.join(known)})")
    if min(a.rounds, a.iters, a.repeats, a.embed_inputs, a.embed_batch) < 1 or min(a.warmup, a.batch) < 0:
        p.error("--rounds, --iters, --repeats, --embed-inputs and --embed-batch must be >= 1, --warmup and --batch "
                ">= 0")
    a.run_id = f"{int(time.time())}-{os.getpid()}"
    return a


def main():
    a = parse_args()
    if a.report:
        print(gpu_bench_report.report(gpu_bench_report.load(a.report)))
        return
    rec = Recorder(a.results)
    meta = machine_info(a, a.on_gpu)
    precisions = a.precisions.split(",")
    if not a.on_gpu and precisions != ["FP32"]:
        meta["notes"].append(f"--device cpu runs FP32 only; {', '.join(p for p in precisions if p != 'FP32')} left out")
        precisions = ["FP32"]
    impls = a.impls.split(",")
    if "pytorch-compile" in impls and meta["torch"] and not meta["torch"].get("compile"):
        meta["notes"].append(f"torch.compile left out: PyTorch {meta['torch'].get('torch')} has none (it came in 2.0)")
        impls.remove("pytorch-compile")
    if not meta["torch"]:
        impls = [i for i in impls if i.startswith("strata")]
    meta["impls"] = impls
    models = a.models.split(",")
    tasks = a.tasks.split(",")
    plan = [(t, [m for m in models if m in (TRAIN_MODELS if t == "train" else INFER_MODELS)])
            for t in tasks if t != "embed"]
    plan = [(t, ms) for t, ms in plan if ms]
    embed_models = [m for m in models if m in INFER_MODELS] if "embed" in tasks else []
    measure_peaks(rec, a, a.on_gpu, meta)

    common = ["--device", a.device, "--iters", str(a.iters), "--warmup", str(a.warmup), "--repeats", str(a.repeats),
              "--threads", str(a.threads)] + (["--batch", str(a.batch)] if a.batch else [])
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="strata_gpu_bench_") as tmp:
        if embed_models:
            weights_cmd = [os.path.join(a.build, "strata_bench_infer"), "--models", ",".join(embed_models),
                           "--save-weights", tmp, "--threads", str(a.threads)]
            rc, _, err, _ = run_program(weights_cmd, a.timeout, "strata_bench_infer --save-weights")
            if rc != 0:
                sys.exit(f"writing the embed weights failed ({failure_reason(rc, err, a.timeout)}): "
                         f"{shlex.join(weights_cmd)}")
            inputs = os.path.join(tmp, "inputs.npy")
            write_npy_inputs(inputs, a.embed_inputs)
        for r in range(a.rounds):
            for task, task_models in plan:
                for precision in precisions:
                    for impl in impls:
                        run_models = task_models
                        if impl == gpu_bench_report.RECOMPUTE_IMPL:
                            if task != "train":
                                continue  # recomputation is a training setting
                            cmd = [os.path.join(a.build, "strata_bench_train"), "--models", ",".join(task_models),
                                   "--precision", precision, "--recompute", "blocks"] + common
                        elif impl == gpu_bench_report.CHANNELS_LAST_IMPL:
                            # A training setting (the solver's channels_last), for the nets with
                            # convolutions: ViT-B/16 has none (its patch embedding is a GEMM).
                            conv_models = [m for m in task_models if m != "vit_b16"]
                            if task != "train" or not conv_models:
                                continue
                            cmd = [os.path.join(a.build, "strata_bench_train"), "--models", ",".join(conv_models),
                                   "--precision", precision, "--channels-last", "on"] + common
                            run_models = conv_models
                        elif impl == "strata":
                            program = "strata_bench_train" if task == "train" else "strata_bench_infer"
                            cmd = [os.path.join(a.build, program), "--models", ",".join(task_models),
                                   "--precision", precision] + common
                        else:
                            cmd = [a.python, os.path.join(HERE, "torch_throughput.py"), "--task", task, "--models",
                                   ",".join(task_models), "--precision", precision] + common
                            if impl == "pytorch-compile":
                                cmd.append("--compile")
                        measure(rec, a, cmd, impl, task, precision, run_models, r,
                                f"{impl} {task} {precision} (round {r + 1})")
            for model in embed_models:
                run_embed(rec, a, model, os.path.join(tmp, f"{model}.safetensors"), inputs, r, tmp)
            print(f"round {r + 1}/{a.rounds} done, {time.perf_counter() - start:.0f} s", file=sys.stderr)
    print(gpu_bench_report.report(rec.records))
    if a.results:
        print(f"\nrecords appended to {a.results}; tools/bench/gpu_bench_report.py {a.results} [...] prints the "
              "tables again, merged with other runs")


if __name__ == "__main__":
    main()
