#!/usr/bin/env bash
# End-to-end transfer learning on the bundled digits (models/digits_transfer,
# data/digits/transfer: each 8x8 digit pasted at a random place on a 12x12 canvas):
#   1. a backbone learns the digits 0-4 (1,440 images);
#   2. its convolutions, loaded with --weights and frozen, get a new head trained
#      on 5 examples of each digit 5-9;
#   3. baseline: the same net trained from scratch (random init, every layer
#      trained) on the same 25 examples with the same schedule;
#   4. control: the same frozen net and head without --weights (a frozen random
#      backbone), to show the gain comes from what was learnt on 0-4 and not from
#      freezing alone.
# On every seed the transferred model must beat both the baseline and the control
# by MARGIN on the 358 test images (179 digits 5-9 at 2 places each).
# Measured (models/digits_transfer/README.md, seeds 1-6): transfer 0.56-0.59,
# scratch 0.46-0.52, frozen random 0.41-0.48; smallest transfer - scratch 0.067.
# Usage: this script STRATA SRC [SEED...]   (default seeds: 1 2 3)
set -euo pipefail
strata="$1"
src="$2"
shift 2
seeds=("$@")
[ ${#seeds[@]} -gt 0 ] || seeds=(1 2 3)
MARGIN=0.04
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

final_accuracy() { grep -o 'accuracy = [0-9.]*' "$1" | tail -n 1 | awk '{print $3}'; }
fail() { echo "FAIL: $1"; [ -n "${2:-}" ] && cat "$2"; exit 1; }

for seed in "${seeds[@]}"; do
  run="$work/seed$seed"
  mkdir -p "$run/models" "$run/data/digits"
  cp -r "$src/models/digits_transfer" "$run/models/"
  cp -r "$src/data/digits/transfer" "$run/data/digits/"
  m="$run/models/digits_transfer"
  rm -rf "$m/snapshots"
  for s in "$m"/*_solver.prototxt; do sed -i "s/^random_seed: .*/random_seed: $seed/" "$s"; done

  "$strata" train --solver "$m/backbone_solver.prototxt" --threads 2 > "$run/backbone.txt" 2>&1 ||
    fail "backbone training failed" "$run/backbone.txt"
  backbone=$(final_accuracy "$run/backbone.txt")
  weights="$m/snapshots/backbone_iter_300.safetensors"
  [ -f "$weights" ] || fail "no backbone weights at $weights" "$run/backbone.txt"

  "$strata" train --solver "$m/head_solver.prototxt" --weights "$weights" --threads 2 > "$run/head.txt" 2>&1 ||
    fail "head training failed" "$run/head.txt"
  "$strata" train --solver "$m/scratch_solver.prototxt" --threads 2 > "$run/scratch.txt" 2>&1 ||
    fail "scratch training failed" "$run/scratch.txt"
  # (same solver, so the same snapshot prefix: it replaces the head run's files)
  "$strata" train --solver "$m/head_solver.prototxt" --threads 2 --overwrite > "$run/random.txt" 2>&1 ||
    fail "frozen-random training failed" "$run/random.txt"

  # The head run must have loaded the three convolutions (and nothing of it may be missing
  # but the new head), the control must have loaded nothing.
  grep -q '^loaded 6 parameters' "$run/head.txt" || fail "head run did not load the backbone's 6 conv tensors" "$run/head.txt"
  if grep -q 'loaded' "$run/random.txt"; then fail "control run loaded weights" "$run/random.txt"; fi

  transfer=$(final_accuracy "$run/head.txt")
  scratch=$(final_accuracy "$run/scratch.txt")
  random=$(final_accuracy "$run/random.txt")
  [ -n "$backbone" ] && [ -n "$transfer" ] && [ -n "$scratch" ] && [ -n "$random" ] ||
    fail "a run printed no test accuracy (seed $seed)"
  echo "seed $seed: backbone on 0-4 $backbone; digits 5-9 from 5 examples each:" \
       "transfer $transfer, scratch $scratch, frozen random backbone $random"
  awk -v b="$backbone" 'BEGIN { exit !(b >= 0.95) }' || fail "backbone accuracy $backbone on 0-4 is below 0.95"
  awk -v t="$transfer" -v s="$scratch" -v m="$MARGIN" 'BEGIN { exit !(t >= s + m) }' ||
    fail "seed $seed: transfer accuracy $transfer is not at least $MARGIN above scratch $scratch"
  awk -v t="$transfer" -v r="$random" -v m="$MARGIN" 'BEGIN { exit !(t >= r + m) }' ||
    fail "seed $seed: transfer accuracy $transfer is not at least $MARGIN above a frozen random backbone $random"
done
echo "PASS"
