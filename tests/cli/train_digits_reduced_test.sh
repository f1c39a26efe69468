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
echo "PASS"
