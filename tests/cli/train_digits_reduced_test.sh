#!/usr/bin/env bash
# `strata train` on the bundled digits in BF16 and FP16 on the CPU, as a user
# runs it with `precision:` in the solver: activations and their gradients
# stored in bf16/f16 (the start says so), and the test accuracy within a
# point of the same run in FP32. (Its memory does not shrink: digits' peak is
# a convolution's scratch, and the 16-bit values it saves are smaller than a
# layer call's f32 copies; tests/storage_dtype_test.cpp checks the halving.)
set -euo pipefail
strata="$1"
src="$2"
fail() { echo "FAIL: $*"; exit 1; }
# shellcheck source=tests/cli/digits_lib.sh
source "$src/tests/cli/digits_lib.sh"
setup_digits

final_accuracy() { grep -o 'accuracy = [0-9.]*' "$1" | tail -n 1 | awk '{print $3}'; }

for precision in FP32 BF16 FP16; do
  solver="$dir/solver_$precision.prototxt"
  sed "s|^snapshot_prefix:.*|snapshot_prefix: \"snapshots/digits_$precision\"|" "$dir/solver.prototxt" > "$solver"
  grep -q "digits_$precision" "$solver" || fail "the solver has no snapshot_prefix line to give each run its own"
  [ "$precision" = FP32 ] || echo "precision: $precision" >> "$solver"
  "$strata" train --solver "$solver" --threads 2 > "$work/$precision.txt" 2>&1 || {
    cat "$work/$precision.txt"; fail "$precision training failed"; }
  echo "$precision: accuracy $(final_accuracy "$work/$precision.txt")"
done

f32=$(final_accuracy "$work/FP32.txt")
for precision in BF16 FP16; do
  out="$work/$precision.txt"
  lower=$(echo "$precision" | tr 'A-Z' 'a-z' | sed 's/fp16/f16/')
  grep -q "activations and their gradients stored in $lower" "$out" || {
    cat "$out"; fail "$precision: the start does not say the activations are stored in $lower"; }
  acc=$(final_accuracy "$out")
  awk -v a="$acc" -v b="$f32" 'BEGIN { exit !(a >= b - 0.01) }' || fail "$precision accuracy $acc is more than a point below FP32's $f32"
done

# Scoring in 16 bits: `strata test --precision BF16` on the FP32 run's weights
# stays within a point of the FP32 score; TF32 on the CPU is refused, saying why.
weights="$dir/snapshots/digits_FP32_iter_600.safetensors"
[ -f "$weights" ] || fail "no FP32 snapshot at $weights"
score() { "$strata" test --model "$dir/train.prototxt" --weights "$weights" --threads 2 "$@" | grep -o 'accuracy = [0-9.]*' | awk '{print $3}'; }
s32=$(score)
s16=$(score --precision bf16)  # the flag takes any case
echo "strata test: FP32 $s32, BF16 $s16"
awk -v a="$s16" -v b="$s32" 'BEGIN { exit !(a >= b - 0.01) }' || fail "strata test --precision BF16 scores $s16, more than a point below FP32's $s32"
if "$strata" test --model "$dir/train.prototxt" --weights "$weights" --precision TF32 > "$work/tf32.txt" 2>&1; then
  fail "--precision TF32 on the CPU was accepted"
fi
grep -q "TF32 is a tensor-core mode" "$work/tf32.txt" || { cat "$work/tf32.txt"; fail "the TF32 refusal does not say why"; }
echo "PASS"
