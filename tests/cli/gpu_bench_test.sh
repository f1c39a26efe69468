#!/usr/bin/env bash
# tools/bench/run_gpu_bench.py without a GPU: the nominal FLOPs behind MFU, the
# table built from GPU records (ratios and targets marked, MFU against the
# precision's matmul peak, per-round ratios, a failed run, the recompute and embed tables,
# two result files merged), the .npy it writes for `strata embed`, and a
# --device cpu run end to end with the smallest settings (strata and
# PyTorch on cifar_vgg; skipped when /usr/bin/python3 has no torch).
# Usage: gpu_bench_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build="$1"
src="$2"
bench="$src/tools/bench"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
has() { [[ $1 == *"$2"* ]] || fail "$3: expected '$2' in:"$'\n'"$1"; }

# Nominal FLOPs: the published counts (VGG-16 15.47 GMAC, ViT-B/16 17.56
# GMAC a forward pass) and cifar_vgg's 0.923 GFLOP a training image.
flops=$(python3 "$bench/model_flops.py")
has "$flops" "vgg16: forward 30.941 GFLOP/image, training step 92.822 GFLOP/image" "VGG-16 FLOPs"
has "$flops" "vit_b16: forward 35.128 GFLOP/image" "ViT-B/16 FLOPs"
has "$flops" "cifar_vgg: forward 0.308 GFLOP/image, training step 0.923 GFLOP/image" "cifar_vgg FLOPs"

# GPU records as two split runs write them (one has the peaks and BF16
# training, the other FP32 inference, a failed compile and the embed rows).
cat > "$work/a.jsonl" <<'EOF'
{"kind": "meta", "device": "cuda", "date": "2026-01-01 00:00 UTC", "command": "python3 tools/bench/run_gpu_bench.py --precisions BF16", "python": "python3", "threads": 16, "rounds": 2, "iters": 20, "warmup": 5, "repeats": 3, "notes": [], "commit": "abc1234", "cpu": "x", "torch": {"torch": "2.11.0", "torch_cuda": "13.0", "compile": true, "cudnn": 91002, "gpu": "NVIDIA H200"}, "nvidia_smi": {"name": "NVIDIA H200", "driver": "580.65.06"}, "gpu_info": {"gpu": "NVIDIA H200", "memory_bytes": 150121545728, "sm": "9.0", "cuda_driver": 13000, "cuda_runtime": 13000, "cublas": 130001, "cudnn": 91002}, "impls": ["strata", "pytorch-eager", "pytorch-compile"]}
{"kind": "peak", "precision": "BF16", "tflops": 700.0, "what": "cuBLAS 8192^3"}
{"kind": "peak", "precision": "FP32", "tflops": 50.0, "what": "cuBLAS 8192^3"}
{"kind": "row", "run": "a", "round": 0, "impl": "strata", "task": "train", "model": "vgg16", "precision": "BF16", "batch": 64, "samples_per_s": 800.0, "peak_allocated_bytes": 10737418240}
{"kind": "row", "run": "a", "round": 0, "impl": "pytorch-eager", "task": "train", "model": "vgg16", "precision": "BF16", "batch": 64, "samples_per_s": 2000.0, "peak_allocated_bytes": 4831838208}
{"kind": "row", "run": "a", "round": 0, "impl": "pytorch-compile", "task": "train", "model": "vgg16", "precision": "BF16", "batch": 64, "samples_per_s": 4000.0, "peak_allocated_bytes": 4294967296, "first_step_s": 41.0}
{"kind": "row", "run": "a", "round": 1, "impl": "strata", "task": "train", "model": "vgg16", "precision": "BF16", "batch": 64, "samples_per_s": 900.0, "peak_allocated_bytes": 10737418240, "steady_peak_allocated_bytes": 6442450944}
{"kind": "row", "run": "a", "round": 1, "impl": "pytorch-eager", "task": "train", "model": "vgg16", "precision": "BF16", "batch": 64, "samples_per_s": 2000.0, "peak_allocated_bytes": 4831838208, "steady_peak_allocated_bytes": 4294967296}
{"kind": "row", "run": "a", "round": 1, "impl": "pytorch-compile", "task": "train", "model": "vgg16", "precision": "BF16", "batch": 64, "samples_per_s": 4000.0, "peak_allocated_bytes": 4294967296, "first_step_s": 3.0}
{"kind": "row", "run": "a", "round": 1, "impl": "strata-recompute", "task": "train", "model": "vgg16", "precision": "BF16", "batch": 64, "samples_per_s": 600.0, "peak_allocated_bytes": 3221225472}
{"kind": "row", "run": "a", "round": 1, "impl": "strata-nhwc", "task": "train", "model": "vgg16", "precision": "BF16", "batch": 64, "samples_per_s": 1000.0, "peak_allocated_bytes": 9663676416}
EOF
cat > "$work/b.jsonl" <<'EOF'
{"kind": "meta", "device": "cuda", "command": "python3 tools/bench/run_gpu_bench.py --precisions FP32 --tasks infer,embed", "notes": ["a note"]}
{"kind": "row", "run": "b", "round": 0, "impl": "strata", "task": "infer", "model": "vit_b16", "precision": "FP32", "batch": 64, "samples_per_s": 1500.0, "peak_allocated_bytes": 1073741824}
{"kind": "row", "run": "b", "round": 0, "impl": "pytorch-eager", "task": "infer", "model": "vit_b16", "precision": "FP32", "batch": 64, "samples_per_s": 1000.0, "peak_allocated_bytes": 2147483648}
{"kind": "row", "run": "b", "round": 0, "impl": "pytorch-compile", "task": "infer", "model": "vit_b16", "precision": "FP32", "error": "exit 1: InductorError: no C compiler"}
{"kind": "row", "run": "b", "round": 0, "impl": "strata", "task": "embed", "model": "vit_b16", "precision": "FP32", "batch": 64, "inputs": 256, "samples_per_s": 128.0, "wall_s": 2.0, "streaming_per_s": 900.0, "peak_allocated_bytes": 3221225472}
EOF
out=$(python3 "$bench/gpu_bench_report.py" "$work/a.jsonl" "$work/b.jsonl")
has "$out" "GPU: NVIDIA H200 (139.8 GiB, sm 9.0), driver 580.65.06 (CUDA driver API 13.0)" "GPU line"
has "$out" "cuBLAS 13.0.1, cuDNN 9.10.2, commit abc1234" "library versions"
has "$out" "PyTorch 2.11.0 (CUDA 13.0, cuDNN 9.10.2)" "PyTorch versions"
has "$out" "matmul peak (cuBLAS 8192^3 GEMM, median): FP32 50.0 TFLOP/s, BF16 700.0 TFLOP/s" "peaks"
has "$out" "command: python3 tools/bench/run_gpu_bench.py --precisions BF16" "first command"
has "$out" "command: python3 tools/bench/run_gpu_bench.py --precisions FP32 --tasks infer,embed" "second command"
has "$out" "note: a note" "notes"
# BF16 VGG-16 training: medians 850 / 2000 / 4000; MFU 850 x 92.822 GFLOP over
# 700 TFLOP/s = 11%; memory 10240 MiB against 4608; rounds 0.40, 0.45; steady
# peaks (round 1 only) 6144 MiB against 4096.
has "$out" "| train | VGG-16 | 64 | BF16 | 850 | 2,000 | 4,000 | 0.42 (< 1.1) | 0.21 (< 1.0) | 10,240 / 4,608 / 4,096 | 2.22 (> 1.0) | 11% / 27% / 53% | 22.0 | 0.40, 0.45 | 6,144 / 4,096 |" \
  "VGG-16 BF16 training row"
# FP32 ViT-B/16 inference: 1.5x eager (met), compile failed, no compile target.
has "$out" "| infer | ViT-B/16 | 64 | FP32 | 1,500 | 1,000 | failed | 1.50 (≥ 1.1) | — | 1,024 / 2,048 / — | 0.50 (≤ 1.0) | 105% / 70% / — | — | 1.50 | — / — |" \
  "ViT-B/16 FP32 inference row"
has "$out" "| ViT-B/16 | 256 | 64 | 128 | 900 | 2.0 | 3,072 | 1,000 |" "embed row"
# strata-recompute (every VGG stage recomputed): its own table, speed against
# strata without, memory against eager (a target only for ViT-B/16).
has "$out" "| VGG-16 | BF16 | 600 | 850 | 2,000 | 0.71 | 3,072 / 10,240 / 4,608 | 0.67 |" "recompute row"
# strata-nhwc (channels_last): its own table against strata's NCHW row.
has "$out" "| VGG-16 | BF16 | 1,000 | 850 | 1.18 | 9,216 / 10,240 |" "channels-last row"
has "$out" "targets met: 2; missed: 3" "target count"
has "$out" "- VGG-16 BF16 train: strata / compile 0.21 < 1.0" "compile miss listed"
has "$out" "- ViT-B/16 FP32 infer, pytorch-compile: exit 1: InductorError: no C compiler" "failure listed"
# A record file cut short says which line and what to do.
printf '{"kind": "row", "run"' >> "$work/b.jsonl"
if err=$(python3 "$bench/gpu_bench_report.py" "$work/b.jsonl" 2>&1); then fail "a cut record was accepted"; fi
has "$err" "b.jsonl:6: not a JSON record" "cut record message"

# The inputs written for `strata embed --input` are a .npy numpy reads.
if /usr/bin/python3 -c "import numpy" 2>/dev/null; then
  python3 -c "import sys; sys.path.insert(0, '$bench'); import run_gpu_bench as r; r.write_npy_inputs('$work/in.npy', 3, (3, 4, 5))"
  /usr/bin/python3 -c "
import numpy as np
a = np.load('$work/in.npy')
assert a.shape == (3, 3, 4, 5) and a.dtype == np.float32, (a.shape, a.dtype)
assert (a[0] == a[2]).all() and abs(a[0, 0, 0, 1] - (7919 % 1000 / 500.0 - 1.0)) < 1e-6, a[0, 0, 0, :3]
" || fail "the inputs .npy does not load as 3 x 3 x 4 x 5 float32"
fi

# Unknown names are refused with the known ones.
if err=$(python3 "$bench/run_gpu_bench.py" --build "$build" --models resnet 2>&1); then fail "--models resnet accepted"; fi
has "$err" "--models: unknown 'resnet' (known: vgg16, vit_b16, cifar_vgg)" "unknown model"

# End to end on the CPU: cifar_vgg training, strata and PyTorch eager.
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  out=$(python3 "$bench/run_gpu_bench.py" --build "$build" --device cpu --python /usr/bin/python3 --models cifar_vgg \
          --precisions FP32,BF16 --rounds 1 --iters 1 --warmup 1 --repeats 1 --results "$work/cpu.jsonl" 2>"$work/err") ||
    { cat "$work/err"; fail "the CPU run failed"; }
  has "$out" "matmul peak (strata SGEMM 1024^3, median): FP32" "CPU peak"
  has "$out" "note: --device cpu runs FP32 only; BF16 left out" "CPU precision note"
  row=$(grep "^| train | cifar_vgg | 32 | FP32 | " <<<"$out" || true)
  [[ $row =~ ^\|\ train\ \|\ cifar_vgg\ \|\ 32\ \|\ FP32\ \|\ [0-9.,]+\ \|\ [0-9.,]+\ \|\ .*\ \|\ [0-9]+%\ /\ [0-9]+% ]] ||
    fail "no cifar_vgg row with both rates and MFUs:"$'\n'"$out"
  # strata-nhwc (in the default impls): cifar_vgg with channels_last, in a table of its own.
  has "$out" "Training with the image blobs between convolutions stored NHWC" "channels-last table"
  grep -q '"impl": "strata-nhwc"' "$work/cpu.jsonl" || fail "no strata-nhwc row recorded"
  [[ $(grep -c '"kind": "row"' "$work/cpu.jsonl") -ge 3 ]] || fail "fewer than 3 rows recorded in --results"
  again=$(python3 "$bench/gpu_bench_report.py" "$work/cpu.jsonl")
  has "$again" "$row" "the table again from --results"
else
  echo "skipping the CPU run: /usr/bin/python3 has no torch"
fi

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "gpu bench: all checks passed"
