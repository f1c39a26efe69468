#!/usr/bin/env bash
# End-to-end resume, as a user does it with `strata train`:
# N iterations straight, versus N/2 iterations with a snapshot and then
# `strata train --snapshot <state>` up to N: the final weights and solver
# state files must be identical, byte for byte.
# (Ctrl-C and the other stop signals, and resuming their snapshots:
# stop_signals_test.sh.)
# Usage: resume_test.sh STRATA_BINARY SOURCE_DIR
set -euo pipefail
strata="$1"
src="$2"
fail() { echo "FAIL: $*"; exit 1; }
# shellcheck source=tests/cli/digits_lib.sh
source "$(dirname "$0")/digits_lib.sh"  # $work, setup_digits
setup_digits

# The digits solver with a schedule that does not depend on max_iter (the
# halves run with max_iter N/2 and N), a learning-rate step inside each half,
# warm-up across the cut, and tests every 10 iterations (the TEST net's data
# cursor is part of the state). Dropout and shuffling exercise the RNG state.
N=40
half=$((N / 2))
make_solver() {  # make_solver OUT MAX_ITER SNAPSHOT PREFIX
  sed -e "s|^max_iter:.*|max_iter: $2|" \
      -e "s|^snapshot:.*|snapshot: $3|" \
      -e "s|^snapshot_prefix:.*|snapshot_prefix: \"$4\"|" \
      -e 's|^lr_policy:.*|lr_policy: "step"\nstepsize: 15\ngamma: 0.5|' \
      -e 's|^warmup_iter:.*|warmup_iter: 25|' \
      -e 's|^test_interval:.*|test_interval: 10|' \
      -e 's|^display:.*|display: 5|' \
      "$dir/solver.prototxt" > "$1"
}
make_solver "$dir/straight.prototxt" "$N" 0 "straight/digits"
make_solver "$dir/half.prototxt" "$half" "$half" "split/digits"
make_solver "$dir/rest.prototxt" "$N" 0 "split/digits"
grep -q '^lr_policy: "step"' "$dir/straight.prototxt" || fail "could not rewrite the solver file"

echo "== $N iterations straight"
"$strata" train --solver "$dir/straight.prototxt" --threads 2 > "$work/straight.txt"
echo "== $half iterations, then resume to $N"
"$strata" train --solver "$dir/half.prototxt" --threads 2 > "$work/half.txt"
state="$dir/split/digits_iter_${half}.solverstate.safetensors"
[ -f "$state" ] || fail "no snapshot at iteration $half: $(ls "$dir/split")"
cp "$dir/split/digits_iter_${half}.safetensors" "$work/half_weights.safetensors"
"$strata" train --solver "$dir/rest.prototxt" --snapshot "$state" --threads 2 > "$work/rest.txt"
grep -q "resumed from .* at iteration $half" "$work/rest.txt" || { cat "$work/rest.txt"; fail "no 'resumed from ... at iteration $half'"; }

a="$dir/straight/digits_iter_${N}.safetensors"
b="$dir/split/digits_iter_${N}.safetensors"
[ -f "$a" ] && [ -f "$b" ] || fail "missing final weights: $(ls "$dir/straight" "$dir/split")"
# The comparison means something only if the second half trained.
if cmp -s "$work/half_weights.safetensors" "$b"; then fail "weights did not change after the resume"; fi
cmp "$a" "$b" || fail "resumed weights differ from the straight run's"
cmp "$dir/straight/digits_iter_${N}.solverstate.safetensors" "$dir/split/digits_iter_${N}.solverstate.safetensors" ||
  fail "resumed solver state (optimizer history, data cursors, RNGs) differs from the straight run's"
# The console reports the same losses, rates and test scores after the cut.
after_cut() {  # progress and test lines for iterations in (half, N], without timings
  grep -o -e '^iter [0-9]*/[0-9]*  loss [^ ]*  lr [^ ]*' -e '^test @ [0-9]*: .*' "$1" |
    awk -v h="$half" '{ split($0, f, /[ \/:]+/); it = ($1 == "iter") ? f[2] : f[3]; if (it + 0 > h) print }'
}
after_cut "$work/straight.txt" > "$work/straight_after.txt"
after_cut "$work/rest.txt" > "$work/rest_after.txt"
[ "$(grep -c '^iter' "$work/straight_after.txt")" -eq $(((N - half) / 5)) ] ||
  { cat "$work/straight.txt"; fail "expected $(((N - half) / 5)) progress lines after iteration $half"; }
grep -q '^test @ ' "$work/straight_after.txt" || fail "no test after iteration $half in the straight run"
diff "$work/straight_after.txt" "$work/rest_after.txt" || fail "the resumed run reports other losses than the straight run"
echo "PASS: resume is bit-for-bit ($(sha256sum < "$a" | cut -c1-16))"
