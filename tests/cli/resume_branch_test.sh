#!/usr/bin/env bash
# A resume never rewrites a newer snapshot of its own prefix:
#   1. resumed from iteration 4 of a run that went on to 8, it writes under
#      "<prefix>_from4" (its snapshots and its log) and says so; the run's own
#      iteration-8 files and log stay byte for byte, and the branch's
#      iteration-8 weights equal them (same threads: bit-exact resume);
#   2. a second resume from 4, with --overwrite, takes "<prefix>_from4_2" and
#      deletes nothing;
#   3. a log set in the solver branches beside itself ("train.jsonl" ->
#      "train_from4.jsonl");
#   4. resumed from the newest snapshot, the run continues under its prefix
#      and appends to its log, as before;
#   5. a best snapshot (snapshot_best) from before the branch point is named
#      where it lies, under the run's own prefix;
#   6. data parallel (2 ranks under strata launch): rank 0, the one that
#      writes, branches the same way.
# Usage: resume_branch_test.sh STRATA_BINARY SOURCE_DIR
set -euo pipefail
strata="$1"
src="$2"
fail() { echo "FAIL: $*"; exit 1; }
# shellcheck source=tests/cli/digits_lib.sh
source "$(dirname "$0")/digits_lib.sh"  # $work, setup_digits
setup_digits

make_solver() {  # make_solver OUT MAX_ITER PREFIX [LOG]
  sed -e "s|^max_iter:.*|max_iter: $2|" -e 's|^snapshot:.*|snapshot: 4|' \
      -e "s|^snapshot_prefix:.*|snapshot_prefix: \"$3\"${4:+\nlog: \"$4\"}|" \
      -e 's|^warmup_iter:.*|warmup_iter: 2|' -e 's|^test_interval:.*|test_interval: 4|' \
      -e 's|^display:.*|display: 2|' "$dir/solver.prototxt" > "$1"
}
make_solver "$dir/s8.prototxt" 8 runs/digits
make_solver "$dir/s12.prototxt" 12 runs/digits
make_solver "$dir/own_log.prototxt" 8 own/digits own/train.jsonl
grep -q '^log: "own/train.jsonl"' "$dir/own_log.prototxt" || fail "could not rewrite the solver file"
runs="$dir/runs"
# Content and inode: a snapshot written again is a new file (renamed into
# place), even where a bit-exact resume gives it the same bytes.
sums() { (cd "$runs" && sha256sum digits_iter_4.* digits_iter_8.* digits_log.jsonl &&
          stat -c '%n %i' digits_iter_4.* digits_iter_8.* digits_log.jsonl); }

echo "== 8 iterations, snapshots at 4 and 8"
"$strata" train --solver "$dir/s8.prototxt" --threads 2 > "$work/first.txt"
[ -f "$runs/digits_iter_8.solverstate.safetensors" ] || fail "no snapshot at iteration 8: $(ls "$runs")"
before=$(sums)

echo "== 1. resume from 4"
"$strata" train --solver "$dir/s8.prototxt" --threads 2 \
  --snapshot "$runs/digits_iter_4.solverstate.safetensors" > "$work/branch.txt" ||
  { cat "$work/branch.txt"; fail "the resume from 4 failed"; }
grep "^note: '.*runs/digits' holds snapshots up to iteration 8, newer than this resume from iteration 4: this run writes its snapshots as '.*runs/digits_from4_iter_<N>' and its log to '.*runs/digits_from4_log.jsonl' (the newer snapshots stay as they are)$" \
  "$work/branch.txt" || { cat "$work/branch.txt"; fail "no line naming the branch"; }
[ "$(sums)" = "$before" ] || fail "the resume changed the run's own snapshots or log"
for f in digits_from4_iter_8.safetensors digits_from4_iter_8.solverstate.safetensors digits_from4_log.jsonl; do
  [ -s "$runs/$f" ] || fail "the branch has no $f: $(ls "$runs")"
done
grep -q "^snapshot: .*runs/digits_from4_iter_8.solverstate.safetensors$" "$work/branch.txt" ||
  { cat "$work/branch.txt"; fail "the last snapshot line does not name the branch"; }
! ls "$runs"/digits_from4_iter_4.* > /dev/null 2>&1 || fail "the branch rewrote the snapshot it started from"
! ls "$runs"/*.lock > /dev/null 2>&1 || fail "lock files left behind: $(ls "$runs"/*.lock)"
grep -q '"iter":8' "$runs/digits_from4_log.jsonl" || fail "the branch log has no iteration 8"
cmp "$runs/digits_iter_8.safetensors" "$runs/digits_from4_iter_8.safetensors" ||
  fail "the branch's iteration-8 weights differ from the run's own (resume is bit-exact on the same threads)"

echo "== 2. again from 4, with --overwrite"
"$strata" train --solver "$dir/s8.prototxt" --threads 2 --overwrite \
  --snapshot "$runs/digits_iter_4.solverstate.safetensors" > "$work/branch2.txt" ||
  { cat "$work/branch2.txt"; fail "the second resume from 4 failed"; }
grep -q "writes its snapshots as '.*runs/digits_from4_2_iter_<N>' and its log to '.*runs/digits_from4_2_log.jsonl'" \
  "$work/branch2.txt" || { cat "$work/branch2.txt"; fail "the second branch is not digits_from4_2"; }
[ "$(sums)" = "$before" ] || fail "--overwrite with --snapshot changed the run's own snapshots or log"
[ -f "$runs/digits_from4_iter_8.safetensors" ] || fail "the second resume removed the first branch"
[ -f "$runs/digits_from4_2_iter_8.safetensors" ] || fail "the second branch has no iteration 8: $(ls "$runs")"

echo "== 3. a log set in the solver"
"$strata" train --solver "$dir/own_log.prototxt" --threads 2 > "$work/own.txt"
own_log=$(sha256sum < "$dir/own/train.jsonl")
"$strata" train --solver "$dir/own_log.prototxt" --threads 2 \
  --snapshot "$dir/own/digits_iter_4.solverstate.safetensors" > "$work/own_branch.txt" ||
  { cat "$work/own_branch.txt"; fail "the resume with a log of its own failed"; }
grep -q "its snapshots as '.*own/digits_from4_iter_<N>' and its log to '.*own/train_from4.jsonl'" \
  "$work/own_branch.txt" || { cat "$work/own_branch.txt"; fail "the log set in the solver did not branch beside itself"; }
[ "$(sha256sum < "$dir/own/train.jsonl")" = "$own_log" ] || fail "the branch wrote to the run's own log"
grep -q '"iter":8' "$dir/own/train_from4.jsonl" || fail "the branch log own/train_from4.jsonl has no iteration 8"

echo "== 4. resume from the newest snapshot"
log_size=$(wc -c < "$runs/digits_log.jsonl")
cp "$runs/digits_log.jsonl" "$work/log_before.jsonl"
"$strata" train --solver "$dir/s12.prototxt" --threads 2 \
  --snapshot "$runs/digits_iter_8.solverstate.safetensors" > "$work/newest.txt" ||
  { cat "$work/newest.txt"; fail "the resume from the newest snapshot failed"; }
! grep -q "newer than this resume" "$work/newest.txt" || { cat "$work/newest.txt"; fail "a resume from the newest branched"; }
[ -f "$runs/digits_iter_12.solverstate.safetensors" ] || fail "no snapshot at 12 under the run's prefix: $(ls "$runs")"
! ls "$runs"/digits_from8* > /dev/null 2>&1 || fail "a resume from the newest snapshot wrote a branch"
cmp -n "$log_size" "$work/log_before.jsonl" "$runs/digits_log.jsonl" || fail "the log was not appended to"
[ "$(wc -c < "$runs/digits_log.jsonl")" -gt "$log_size" ] || fail "nothing appended to the log"
grep -q '"iter":12' "$runs/digits_log.jsonl" || fail "the appended log has no iteration 12"
echo "== 5. snapshot_best across the branch point"
# MIN of the accuracy: the untrained net's test at 0 is the best, from before the branch.
sed -e 's|runs/digits|best/digits|' -e 's|^snapshot: 4|snapshot: 4\nsnapshot_best: "accuracy"\nsnapshot_best_mode: MIN|' \
  "$dir/s8.prototxt" > "$dir/best.prototxt"
"$strata" train --solver "$dir/best.prototxt" --threads 2 > "$work/best.txt"
grep -q '^best accuracy .* at iteration 0: ' "$work/best.txt" || { cat "$work/best.txt"; fail "the best test is not at 0"; }
"$strata" train --solver "$dir/best.prototxt" --threads 2 \
  --snapshot "$dir/best/digits_iter_4.solverstate.safetensors" > "$work/best_branch.txt" ||
  { cat "$work/best_branch.txt"; fail "the resume with snapshot_best failed"; }
grep -q "writes its snapshots as '.*best/digits_from4_iter_<N>'" "$work/best_branch.txt" || fail "no branch"
best=$(sed -n 's/^best accuracy .* at iteration 0: //p' "$work/best_branch.txt")
[ "$best" = "$dir/best/digits_iter_0.safetensors" ] && [ -f "$best" ] ||
  { cat "$work/best_branch.txt"; fail "the best snapshot is not named where it lies ($dir/best/digits_iter_0.safetensors)"; }
echo "== 6. two data-parallel ranks"
sed -e 's|runs/digits|dp/digits|' "$dir/s8.prototxt" > "$dir/dp.prototxt"
"$strata" launch --nproc 2 -- "$strata" train --solver "$dir/dp.prototxt" --threads 1 > "$work/dp.txt" 2>&1 ||
  { cat "$work/dp.txt"; fail "2 ranks with snapshots at 4 and 8 failed"; }
dp_before=$(cd "$dir/dp" && sha256sum digits_iter_8.* && stat -c '%n %i' digits_iter_8.*)
"$strata" launch --nproc 2 -- "$strata" train --solver "$dir/dp.prototxt" --threads 1 \
  --snapshot "$dir/dp/digits_iter_4.solverstate.safetensors" > "$work/dp_branch.txt" 2>&1 ||
  { cat "$work/dp_branch.txt"; fail "the 2-rank resume from 4 failed"; }
grep -q "^\[rank 0\] note: .* this run writes its snapshots as '.*dp/digits_from4_iter_<N>'" "$work/dp_branch.txt" ||
  { cat "$work/dp_branch.txt"; fail "rank 0 did not name the branch"; }
[ "$(cd "$dir/dp" && sha256sum digits_iter_8.* && stat -c '%n %i' digits_iter_8.*)" = "$dp_before" ] ||
  fail "the 2-rank resume changed the run's own iteration-8 files"
cmp "$dir/dp/digits_iter_8.safetensors" "$dir/dp/digits_from4_iter_8.safetensors" ||
  fail "the 2-rank branch's iteration-8 weights differ from the run's own"
echo "PASS: resumes from an older snapshot branch (_from4, _from4_2, a log of its own, 2 ranks) and leave the newer files untouched"
