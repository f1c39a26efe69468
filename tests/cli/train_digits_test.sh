#!/usr/bin/env bash
# End-to-end: `strata train` on the bundled digits, as a user runs it, must
# reach at least 97% test accuracy and write its JSON-lines log.
set -euo pipefail
strata="$1"
src="$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$src/models/digits" "$work/digits"
mkdir -p "$work/data" && cp -r "$src/data/digits" "$work/data/digits"
mkdir -p "$work/models" && mv "$work/digits" "$work/models/digits"
rm -rf "$work/models/digits/snapshots"  # a local run's, not part of the model
"$strata" train --solver "$work/models/digits/solver.prototxt" --threads 2 | tee "$work/out.txt"
acc=$(grep -o 'accuracy = [0-9.]*' "$work/out.txt" | tail -n 1 | awk '{print $3}')
echo "final test accuracy: $acc"
awk -v a="$acc" 'BEGIN { exit !(a >= 0.97) }' || { echo "FAIL: accuracy $acc < 0.97"; exit 1; }
log=$(find "$work/models/digits" -name '*.jsonl' | head -n 1)
[ -n "$log" ] || { echo "FAIL: no JSON-lines log written"; exit 1; }
grep -q '"event"' "$log" || { echo "FAIL: log $log has no events"; exit 1; }
echo "PASS"
