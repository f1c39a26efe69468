#!/usr/bin/env bash
# End-to-end transfer learning on the bundled digits (models/digits_transfer):
#   1. a backbone learns the digits 0-4;
#   2. its conv1..fc1 layers, loaded with --weights and frozen, get a new head
#      trained on 10 examples of each digit 5-9;
#   3. baseline: the same net trained from scratch (random init, every layer
#      trained) on the same 50 examples with the same schedule.
# The transferred model must beat the baseline by MARGIN on the 179 test
# images of the digits 5-9.
# NOT REGISTERED IN CTEST: on these 8x8 digits it does not hold. Measured with
# strata, seed 1: transfer 0.877, scratch 0.944. A PyTorch replica over 5-10
# seeds (heads on fc1, pool2, conv3 or pool1 features; 2-10 examples per class;
# frozen-random or fully trained scratch baselines) never gave transfer a margin
# that holds across seeds: features learnt on 0-4 are no better than random
# convolutional features for 5-9 at this size (second attempt with 1-2 examples per
# class, other heads and backbones: models/digits_transfer/README.md). Usage: this
# script STRATA SRC [SEED].
set -euo pipefail
strata="$1"
src="$2"
seed="${3:-1}"
MARGIN=0.10
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/models" "$work/data/digits"
cp -r "$src/models/digits_transfer" "$work/models/"
cp -r "$src/data/digits/transfer" "$work/data/digits/"
m="$work/models/digits_transfer"
rm -rf "$m/snapshots"
for s in "$m"/*_solver.prototxt; do sed -i "s/^random_seed: .*/random_seed: $seed/" "$s"; done

final_accuracy() { grep -o 'accuracy = [0-9.]*' "$1" | tail -n 1 | awk '{print $3}'; }

"$strata" train --solver "$m/backbone_solver.prototxt" --threads 2 > "$work/backbone.txt"
echo "backbone (digits 0-4) test accuracy: $(final_accuracy "$work/backbone.txt")"
weights="$m/snapshots/backbone_iter_300.safetensors"
[ -f "$weights" ] || { echo "FAIL: no backbone weights at $weights"; cat "$work/backbone.txt"; exit 1; }

"$strata" train --solver "$m/head_solver.prototxt" --weights "$weights" --threads 2 > "$work/head.txt"
"$strata" train --solver "$m/scratch_solver.prototxt" --threads 2 > "$work/scratch.txt"
transfer=$(final_accuracy "$work/head.txt")
scratch=$(final_accuracy "$work/scratch.txt")
echo "digits 5-9 from 10 examples each: transfer $transfer, scratch $scratch (seed $seed)"
[ -n "$transfer" ] && [ -n "$scratch" ] || { echo "FAIL: no test accuracy printed"; cat "$work/head.txt"; exit 1; }
# The head run must have loaded the backbone (and only the backbone).
grep -q 'loaded' "$work/head.txt" || { echo "FAIL: head run printed no load report"; cat "$work/head.txt"; exit 1; }
awk -v t="$transfer" -v s="$scratch" -v m="$MARGIN" 'BEGIN { exit !(t >= s + m) }' ||
  { echo "FAIL: transfer accuracy $transfer is not at least $MARGIN above scratch $scratch"; exit 1; }
echo "PASS"
