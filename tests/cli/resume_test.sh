#!/usr/bin/env bash
# End-to-end resume, as a user does it with `strata train`:
#  1. N iterations straight, versus N/2 iterations with a snapshot and then
#     `strata train --snapshot <state>` up to N: the final weights and solver
#     state files must be identical, byte for byte.
#  2. Ctrl-C: SIGINT to a long run makes it finish the iteration, write a
#     snapshot and exit 130; that snapshot resumes with --snapshot.
# Usage: resume_test.sh STRATA_BINARY SOURCE_DIR
set -euo pipefail
strata="$1"
src="$2"
work=$(mktemp -d)
bg_pid=""
cleanup() {
  if [ -n "$bg_pid" ]; then kill -9 "$bg_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

mkdir -p "$work/models" "$work/data"
cp -r "$src/models/digits" "$work/models/digits"
rm -rf "$work/models/digits/snapshots"
cp -r "$src/data/digits" "$work/data/digits"
dir="$work/models/digits"

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

echo "== Ctrl-C"
make_solver "$dir/long.prototxt" 1000000 0 "long/digits"
sed -i 's|^test_interval:.*|test_interval: 0|; s|^display:.*|display: 10|' "$dir/long.prototxt"
"$strata" train --solver "$dir/long.prototxt" --threads 2 > "$work/long.txt" 2> "$work/long_err.txt" &
bg_pid=$!
# Wait until it is training (its JSON-lines log is flushed line by line), then ~1 s more.
for _ in $(seq 1 100); do
  grep -qs '"iteration"' "$dir/long/digits_log.jsonl" && break
  kill -0 "$bg_pid" 2>/dev/null || break
  sleep 0.1
done
sleep 1
kill -0 "$bg_pid" 2>/dev/null || fail "the long run ended before SIGINT: $(cat "$work/long_err.txt")"
kill -INT "$bg_pid"
rc=0
for _ in $(seq 1 300); do
  kill -0 "$bg_pid" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$bg_pid" 2>/dev/null && fail "still running 30 s after SIGINT"
wait "$bg_pid" || rc=$?
bg_pid=""
cat "$work/long_err.txt"
[ "$rc" -eq 130 ] || fail "exit code $rc after SIGINT, expected 130"
grep -q "stopping after this iteration" "$work/long_err.txt" || fail "no message about stopping on SIGINT"
snap=$(sed -n 's/^snapshot: //p' "$work/long.txt" | tail -n 1)
[ -n "$snap" ] || { cat "$work/long.txt"; fail "no 'snapshot:' line after SIGINT"; }
case "$snap" in /*) ;; *) snap="$dir/$snap" ;; esac
[ -f "$snap" ] || fail "snapshot $snap does not exist"
iter=$(echo "$snap" | sed -n 's/.*_iter_\([0-9]*\)\.solverstate\.safetensors$/\1/p')
[ -n "$iter" ] && [ "$iter" -gt 0 ] && [ "$iter" -lt 1000000 ] || fail "unexpected snapshot name $snap"
[ -f "${snap%.solverstate.safetensors}.safetensors" ] || fail "weights file beside $snap is missing"
ls "$dir/long" | grep -q '\.tmp\.' && fail "temporary files left in $dir/long: $(ls "$dir/long")"
echo "interrupted at iteration $iter"

# The snapshot loads and training continues from it.
make_solver "$dir/long_resume.prototxt" $((iter + 5)) 0 "long/digits"
"$strata" train --solver "$dir/long_resume.prototxt" --snapshot "$snap" --threads 2 > "$work/long_resume.txt" ||
  fail "resuming from the SIGINT snapshot failed"
grep -q "resumed from .* at iteration $iter" "$work/long_resume.txt" || { cat "$work/long_resume.txt"; fail "did not resume at $iter"; }
[ -f "$dir/long/digits_iter_$((iter + 5)).safetensors" ] || fail "no snapshot after resuming to $((iter + 5))"
# Its weights score with `strata test`.
"$strata" test --model "$dir/train.prototxt" --weights "${snap%.solverstate.safetensors}.safetensors" \
  --iterations 1 --threads 2 > "$work/score.txt" || fail "strata test on the SIGINT snapshot failed"
grep -q "accuracy = " "$work/score.txt" || fail "no accuracy from strata test"
echo "PASS"
