#!/usr/bin/env bash
# Nothing a user made is lost, and nothing lies about a broken run:
#   1. a run that goes NaN (base_lr 1e30) stops with an error naming the
#      iteration, exits non-zero and writes no snapshot;
#   2. --weights that is a snapshot of the run's own prefix is refused before
#      training (the fine-tune would have written its result over it);
#   3. a second run with the same snapshot prefix while the first runs is
#      refused, and the first one's log stays valid JSON lines;
#   4. staging files left by a run killed while writing a snapshot are
#      removed by the next run and never taken for a snapshot;
#   5. snapshot_keep: 2 keeps the newest two snapshot pairs;
#   6. a fresh run does not replace an earlier run's snapshots and log: it is
#      refused (naming --snapshot, --overwrite), unless --overwrite; a run
#      continued with --snapshot from its own prefix goes on;
#   7. snapshot_best keeps the best test accuracy's snapshot besides the
#      newest (snapshot_keep: 1) and names it.
set -euo pipefail
strata="$1"
src="$2"
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/models" "$work/data"
cp -r "$src/models/digits" "$work/models/digits"
cp -r "$src/data/digits" "$work/data/digits"
m="$work/models/digits"
rm -rf "$m/snapshots"
fail() { echo "FAIL: $*"; exit 1; }

# 1. divergence
sed -e 's/^base_lr: .*/base_lr: 1e30/' -e 's/^max_iter: .*/max_iter: 100/' "$m/solver.prototxt" > "$m/diverge.prototxt"
sed -i 's|snapshots/digits|snapshots/diverge|' "$m/diverge.prototxt"
if "$strata" train --solver "$m/diverge.prototxt" --threads 1 > "$work/diverge.txt" 2>&1; then
  cat "$work/diverge.txt"; fail "a diverging run exited 0"
fi
grep -q "iteration [0-9]*: the loss is" "$work/diverge.txt" || { cat "$work/diverge.txt"; fail "no iteration named"; }
grep -q "nonfinite: SKIP" "$work/diverge.txt" || fail "the remedy is not named"
! ls "$m/snapshots"/diverge_iter_* > /dev/null 2>&1 || fail "the diverging run wrote a snapshot"
echo "ok 1: divergence stops: $(grep -o 'iteration [0-9]*: the loss is [^;]*' "$work/diverge.txt" | head -1)"

# A short good run for what follows.
sed -e 's/^max_iter: .*/max_iter: 40/' -e 's/^test_interval: .*/test_interval: 20/' "$m/solver.prototxt" > "$m/short.prototxt"
"$strata" train --solver "$m/short.prototxt" --threads 1 > "$work/short.txt" 2>&1 || { cat "$work/short.txt"; fail "short run"; }
w="$m/snapshots/digits_iter_40.safetensors"
[ -f "$w" ] || fail "no snapshot $w"
sum_before=$(md5sum "$w" | cut -d' ' -f1)

# 2. --weights of the run's own prefix
if "$strata" train --solver "$m/short.prototxt" --weights "$w" --threads 1 > "$work/own.txt" 2>&1; then
  fail "fine-tuning from the run's own snapshot was not refused"
fi
grep -q "would write its snapshots over it" "$work/own.txt" || { cat "$work/own.txt"; fail "unclear message"; }
[ "$(md5sum "$w" | cut -d' ' -f1)" = "$sum_before" ] || fail "the --weights file changed"
echo "ok 2: --weights of the own prefix refused, file intact"

# 3. two runs with one prefix
sed -e 's/^max_iter: .*/max_iter: 1000000/' -e 's/^display: .*/display: 1/' "$m/solver.prototxt" > "$m/long.prototxt"
sed -i 's|snapshots/digits|snapshots/long|' "$m/long.prototxt"
"$strata" train --solver "$m/long.prototxt" --threads 1 > "$work/long.txt" 2>&1 &
pids+=($!)
for _ in $(seq 1 300); do
  grep -q "^iter" "$work/long.txt" 2>/dev/null && break
  sleep 0.1
done
[ -f "$m/snapshots/long.lock" ] || { cat "$work/long.txt"; fail "no lock file while the first run trains"; }
if "$strata" train --solver "$m/long.prototxt" --threads 1 > "$work/second.txt" 2>&1; then
  fail "a second run with the same prefix was not refused"
fi
grep -q "another run is writing snapshots" "$work/second.txt" || { cat "$work/second.txt"; fail "unclear message"; }
kill -9 "${pids[0]}"; wait "${pids[0]}" 2>/dev/null || true
/usr/bin/env python3 - "$m/snapshots/long_log.jsonl" <<'PY' || fail "the first run's log has invalid lines"
import json, sys
for line in open(sys.argv[1]):
    json.loads(line)
PY
echo "ok 3: second run refused, first run's log valid"

# 4. debris of a killed snapshot write (the lock of the killed run is gone with it)
touch "$m/snapshots/long_iter_7.safetensors.staged" "$m/snapshots/long_iter_7.safetensors.staged.tmp.12345" \
      "$m/snapshots/long_iter_7.solverstate.safetensors.staged"
sed -i 's/^max_iter: .*/max_iter: 2/' "$m/long.prototxt"
# (the killed run left its log: this run replaces it explicitly)
"$strata" train --solver "$m/long.prototxt" --threads 1 --overwrite > "$work/after.txt" 2>&1 || { cat "$work/after.txt"; fail "run after a kill"; }
grep -q "removed 3 unfinished snapshot files" "$work/after.txt" || { cat "$work/after.txt"; fail "debris not reported"; }
! ls "$m/snapshots"/*.staged* > /dev/null 2>&1 || fail "debris left"
echo "ok 4: debris removed"

# 5. retention
sed -e 's/^max_iter: .*/max_iter: 10/' -e 's/^snapshot: .*/snapshot: 2\nsnapshot_keep: 2/' \
    -e 's|snapshots/digits|snapshots/keep|' "$m/solver.prototxt" > "$m/keep.prototxt"
"$strata" train --solver "$m/keep.prototxt" --threads 1 > "$work/keep.txt" 2>&1 || { cat "$work/keep.txt"; fail "keep run"; }
kept=$(cd "$m/snapshots" && ls keep_iter_*.solverstate.safetensors | sort -V | tr '\n' ' ')
[ "$kept" = "keep_iter_8.solverstate.safetensors keep_iter_10.solverstate.safetensors " ] || fail "kept: $kept"
[ "$(ls "$m/snapshots"/keep_iter_*.safetensors | wc -l)" = 4 ] || fail "weights and states not kept in pairs"
echo "ok 5: snapshot_keep 2 kept $kept"

# 6. an earlier run's files (the short run's, under snapshots/digits)
log="$m/snapshots/digits_log.jsonl"
log_before=$(md5sum "$log" | cut -d' ' -f1)
if "$strata" train --solver "$m/short.prototxt" --threads 1 > "$work/again.txt" 2>&1; then
  fail "a fresh run over an earlier run's snapshots was not refused"
fi
grep -q "an earlier run with the snapshot_prefix" "$work/again.txt" || { cat "$work/again.txt"; fail "unclear message"; }
grep -q -- "--snapshot .*digits_iter_40.solverstate.safetensors" "$work/again.txt" || fail "no way to continue named"
grep -q -- "--overwrite" "$work/again.txt" || fail "--overwrite not named"
[ "$(md5sum "$w" | cut -d' ' -f1)" = "$sum_before" ] || fail "the earlier snapshot changed"
[ "$(md5sum "$log" | cut -d' ' -f1)" = "$log_before" ] || fail "the earlier log changed"
sed -e 's/^max_iter: .*/max_iter: 44/' "$m/short.prototxt" > "$m/longer.prototxt"
"$strata" train --solver "$m/longer.prototxt" --threads 1 --snapshot "$m/snapshots/digits_iter_40.solverstate.safetensors" \
    > "$work/continue.txt" 2>&1 || { cat "$work/continue.txt"; fail "continuing the run from its own prefix"; }
[ "$(grep -c '"event":"start"' "$log")" = 2 ] || fail "the continued run did not append to the log"
"$strata" train --solver "$m/short.prototxt" --threads 1 --overwrite > "$work/over.txt" 2>&1 || { cat "$work/over.txt"; fail "--overwrite"; }
grep -q "removed 5 files of an earlier run" "$work/over.txt" || { cat "$work/over.txt"; fail "--overwrite did not say what it removed"; }
! ls "$m/snapshots"/digits_iter_44.* > /dev/null 2>&1 || fail "--overwrite left the earlier run's iteration 44"
[ "$(grep -c '"event":"start"' "$log")" = 1 ] || fail "--overwrite did not start a new log"
echo "ok 6: earlier run kept unless --overwrite; continuing it works"

# 7. best by a test metric
sed -e 's/^max_iter: .*/max_iter: 16/' -e 's/^test_interval: .*/test_interval: 2/' \
    -e 's/^snapshot: .*/snapshot: 2\nsnapshot_keep: 1\nsnapshot_best: "accuracy"/' -e 's/^base_lr: .*/base_lr: 1.0/' \
    -e 's|snapshots/digits|snapshots/best|' "$m/solver.prototxt" > "$m/best.prototxt"
"$strata" train --solver "$m/best.prototxt" --threads 1 > "$work/best.txt" 2>&1 || { cat "$work/best.txt"; fail "best run"; }
best_iter=$(/usr/bin/env python3 - "$m/snapshots/best_log.jsonl" <<'PY'
import json, sys
best = None
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["event"] == "test" and e["outputs"]["accuracy"] is not None:
        if best is None or e["outputs"]["accuracy"] > best[1]:
            best = (e["iter"], e["outputs"]["accuracy"])
print(best[0])
PY
)
kept=$(cd "$m/snapshots" && ls best_iter_*.solverstate.safetensors | sort -V | tr '\n' ' ')
if [ "$best_iter" = 16 ]; then want="best_iter_16.solverstate.safetensors "
else want="best_iter_$best_iter.solverstate.safetensors best_iter_16.solverstate.safetensors "; fi
[ "$kept" = "$want" ] || { cat "$work/best.txt"; fail "kept '$kept', want '$want' (best accuracy at $best_iter)"; }
grep -q "best accuracy .* at iteration $best_iter: .*best_iter_$best_iter.safetensors" "$work/best.txt" \
    || { cat "$work/best.txt"; fail "the best snapshot is not named"; }
echo "ok 7: snapshot_best kept iteration $best_iter besides the newest"
echo "PASS"
