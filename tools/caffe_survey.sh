#!/usr/bin/env bash
# Runs every prototxt of a Caffe source tree through strata, as a Caffe user
# would from the Caffe root, and prints one line per file: deploy nets are
# timed for one iteration (`strata time`), train/val nets built in TRAIN and
# TEST (`strata time --phase`), solvers started for one iteration. A file
# "runs" when strata gets through it; "data absent" when the only error is a
# database or file the tree does not ship (Caffe's LMDBs are made by its
# scripts); otherwise the first line of the error is shown.
# Usage: tools/caffe_survey.sh STRATA_BINARY CAFFE_ROOT
set -uo pipefail
strata="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
cd "$2" || exit 2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
runs=0; absent=0; failed=0
for f in $(find examples models -name '*.prototxt' | sort); do
  if grep -qE '^(net|train_net|test_net|base_lr):|^ *base_lr' "$f"; then
    kind=solver
    sed -e 's/^max_iter:.*/max_iter: 1/' -e 's/^test_interval:.*/test_interval: 1000000/' \
        -e 's/^snapshot:.*/snapshot: 0/' -e "s|^snapshot_prefix:.*|snapshot_prefix: \"$out/snap\"|" "$f" > "$out/solver.prototxt"
    cp "$out/solver.prototxt" "$(dirname "$f")/.survey_solver.prototxt"
    timeout 300 "$strata" train --solver "$(dirname "$f")/.survey_solver.prototxt" --overwrite > "$out/log" 2>&1
    status=$?
    rm -f "$(dirname "$f")/.survey_solver.prototxt"
  elif grep -qE 'type: *"?(Input|input_param)|^input:' "$f"; then
    kind=deploy
    timeout 300 "$strata" time --model "$f" --iterations 1 > "$out/log" 2>&1; status=$?
  else
    kind=net
    timeout 300 "$strata" time --model "$f" --iterations 1 --phase TRAIN > "$out/log" 2>&1; status=$?
  fi
  if [ $status -eq 0 ]; then
    result="runs"; runs=$((runs + 1))
  elif grep -qiE "cannot open (the )?(LMDB|LevelDB|HDF5|database)|no such file|does not exist|exists in neither|not found; tried|cannot read .*(lmdb|leveldb|h5|txt|binaryproto)" "$out/log"; then
    result="data absent: $(grep -m1 -iE 'error' "$out/log" | cut -c1-160)"; absent=$((absent + 1))
  else
    result="FAILS: $(grep -m1 -iE 'error' "$out/log" | cut -c1-200)"; failed=$((failed + 1))
  fi
  printf '%-7s %-62s %s\n' "$kind" "$f" "$result"
done
echo "runs: $runs, data absent: $absent, fails: $failed"
