#!/usr/bin/env bash
# The signals schedulers and shells send stop training as Ctrl-C does:
#  1. SIGTERM, SIGHUP and SIGUSR1 to `strata train` finish the iteration,
#     write a snapshot, log a `finish` event with status "interrupted", leave
#     no lock file and exit 128 + the signal.
#  2. STRATA_STOP_SIGNALS=INT leaves SIGTERM its default action (the process
#     ends at once, no snapshot); a bad value is an error naming it.
#  3. SIGTERM to `strata launch --nproc 2` reaches both data-parallel ranks,
#     which stop after the same iteration; rank 0 writes the snapshot and the
#     launcher exits 143.
# Usage: stop_signals_test.sh STRATA_BINARY SOURCE_DIR
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
make_solver() {  # make_solver OUT PREFIX: a run far longer than the test
  sed -e 's|^max_iter:.*|max_iter: 1000000|' -e 's|^snapshot:.*|snapshot: 0|' \
      -e "s|^snapshot_prefix:.*|snapshot_prefix: \"$2\"|" -e 's|^test_interval:.*|test_interval: 0|' \
      -e 's|^display:.*|display: 10|' "$dir/solver.prototxt" > "$1"
}

# start_run OUT_PREFIX LOG COMMAND...: starts COMMAND in the background and
# waits until its JSON-lines log shows training, then half a second more.
start_run() {
  local out="$1" log="$2"
  shift 2
  "$@" > "$out.txt" 2> "$out.err" &
  bg_pid=$!
  for _ in $(seq 1 200); do
    grep -qs '"iteration"' "$log" && break
    kill -0 "$bg_pid" 2>/dev/null || break
    sleep 0.1
  done
  sleep 0.5
  kill -0 "$bg_pid" 2>/dev/null || fail "the run ended before the signal: $(cat "$out.err")"
}

# wait_run: the background run must end within 30 s; its exit status goes to $rc.
wait_run() {
  for _ in $(seq 1 300); do
    kill -0 "$bg_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$bg_pid" 2>/dev/null && fail "still running 30 s after the signal"
  rc=0
  wait "$bg_pid" || rc=$?
  bg_pid=""
}

for sig in TERM HUP USR1; do
  echo "== SIG$sig to strata train"
  prefix="$dir/run_$sig/digits"
  make_solver "$dir/$sig.prototxt" "run_$sig/digits"
  start_run "$work/$sig" "${prefix}_log.jsonl" "$strata" train --solver "$dir/$sig.prototxt" --threads 2
  kill -s "$sig" "$bg_pid"
  wait_run
  want=$((128 + $(kill -l "$sig")))
  [ "$rc" -eq "$want" ] || { cat "$work/$sig.err"; fail "exit status $rc after SIG$sig, expected $want"; }
  grep -q "SIG$sig: stopping after this iteration" "$work/$sig.err" || fail "no message naming SIG$sig"
  snap=$(sed -n 's/^snapshot: //p' "$work/$sig.txt" | tail -n 1)
  [ -n "$snap" ] || { cat "$work/$sig.txt"; fail "no snapshot after SIG$sig"; }
  case "$snap" in /*) ;; *) snap="$dir/$snap" ;; esac
  [ -f "$snap" ] || fail "snapshot $snap does not exist"
  tail -n 1 "${prefix}_log.jsonl" | grep -q '"event":"finish".*"status":"interrupted"' ||
    fail "the log does not end with an interrupted finish: $(tail -n 1 "${prefix}_log.jsonl")"
  [ ! -e "$prefix.lock" ] || fail "the lock file $prefix.lock was left behind"
done

echo "== STRATA_STOP_SIGNALS=INT: SIGTERM ends the run at once"
make_solver "$dir/only_int.prototxt" "only_int/digits"
start_run "$work/only_int" "$dir/only_int/digits_log.jsonl" \
  env STRATA_STOP_SIGNALS=INT "$strata" train --solver "$dir/only_int.prototxt" --threads 2
kill -TERM "$bg_pid"
wait_run
[ "$rc" -eq 143 ] || fail "exit status $rc, expected 143 (killed by SIGTERM)"
grep -q "stopping after this iteration" "$work/only_int.err" && fail "SIGTERM stopped gracefully though not chosen"
if ls "$dir/only_int" | grep -q 'solverstate'; then fail "a snapshot was written: $(ls "$dir/only_int")"; fi
if out=$(STRATA_STOP_SIGNALS=INT,KILL "$strata" train --solver "$dir/only_int.prototxt" 2>&1); then
  fail "a bad STRATA_STOP_SIGNALS was accepted"
fi
grep -q "STRATA_STOP_SIGNALS is 'INT,KILL': 'KILL' is not one of INT, TERM, HUP, USR1" <<<"$out" ||
  fail "unclear message: $out"

echo "== SIGTERM to strata launch --nproc 2"
make_solver "$dir/dp.prototxt" "dp/digits"
start_run "$work/dp" "$dir/dp/digits_log.jsonl" \
  "$strata" launch --nproc 2 -- "$strata" train --solver "$dir/dp.prototxt" --threads 1
kill -TERM "$bg_pid"
wait_run
[ "$rc" -eq 143 ] || { cat "$work/dp.err" "$work/dp.txt"; fail "launcher exit status $rc, expected 143"; }
grep -q "SIGTERM; forwarding SIGTERM to the ranks" "$work/dp.err" || { cat "$work/dp.err"; fail "no forwarding message"; }
grep -q "^\[rank 0\] snapshot: " "$work/dp.txt" || { cat "$work/dp.txt"; fail "rank 0 wrote no snapshot"; }
grep -q "^\[rank 1\] snapshot: " "$work/dp.txt" && fail "rank 1 wrote a snapshot too"
tail -n 1 "$dir/dp/digits_log.jsonl" | grep -q '"status":"interrupted"' || fail "no interrupted finish in the log"
[ ! -e "$dir/dp/digits.lock" ] || fail "the lock file was left behind"
echo "PASS"
