#!/usr/bin/env bash
# Ctrl-C, and the signals schedulers and shells send, stop training after a
# snapshot:
#  1. SIGINT, SIGTERM, SIGHUP and SIGUSR1 to `strata train` finish the
#     iteration, write a snapshot, log a `finish` event with status
#     "interrupted", leave no lock or temporary file and exit 128 + the
#     signal; the snapshot resumes with --snapshot and scores with strata test.
#  2. STRATA_STOP_SIGNALS=INT leaves SIGTERM its default action (the process
#     ends at once, no snapshot); a bad value is an error naming it.
#  3. SIGTERM to `strata launch --nproc 2` reaches both data-parallel ranks,
#     which stop after the same iteration; rank 0 writes the snapshot and the
#     launcher exits 143.
#  4. SIGHUP to `strata launch --nproc 2 --servers 1` of a parameter-server
#     run (SYNC): the workers stop, worker 0 writes a snapshot that resumes,
#     the server ends, and the launcher exits 129.
#  5. Ctrl-Z (SIGTSTP) to `strata launch --nproc 2` stops the launcher and
#     both ranks (nothing trains while suspended, longer than the heartbeat
#     limit); SIGCONT (`fg`) continues all three, no rank is named silent,
#     and the job then stops on SIGTERM as usual.
#  6. `strata launch ... | head`: the reader ends early (SIGPIPE, EPIPE), the
#     launcher says so once and the job trains on to its end, exit 0.
#  7. SIGTERM to a pipeline (`--pp 2`) under `strata launch`: both stages stop
#     after the same iteration, one snapshot is written and it resumes.
# Usage: stop_signals_test.sh STRATA_BINARY SOURCE_DIR
set -euo pipefail
strata="$1"
src="$2"
fail() { echo "FAIL: $*"; exit 1; }
# shellcheck source=tests/cli/digits_lib.sh
source "$(dirname "$0")/digits_lib.sh"  # $work, setup_digits, start_run, wait_run
setup_digits
make_solver() {  # make_solver OUT PREFIX: a run far longer than the test
  sed -e 's|^max_iter:.*|max_iter: 1000000|' -e 's|^snapshot:.*|snapshot: 0|' \
      -e "s|^snapshot_prefix:.*|snapshot_prefix: \"$2\"|" -e 's|^test_interval:.*|test_interval: 0|' \
      -e 's|^display:.*|display: 10|' "$dir/solver.prototxt" > "$1"
}

for sig in INT TERM HUP USR1; do
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
  [ -f "${snap%.solverstate.safetensors}.safetensors" ] || fail "weights file beside $snap is missing"
  if ls "$dir/run_$sig" | grep -q '\.tmp\.'; then fail "temporary files left: $(ls "$dir/run_$sig")"; fi
done

echo "== the snapshot of an interrupted run resumes, and its weights score"
iter=$(echo "$snap" | sed -n 's/.*_iter_\([0-9]*\)\.solverstate\.safetensors$/\1/p')
[ -n "$iter" ] && [ "$iter" -gt 0 ] || fail "unexpected snapshot name $snap"
sed -e "s|^max_iter:.*|max_iter: $((iter + 5))|" "$dir/USR1.prototxt" > "$dir/resume.prototxt"
"$strata" train --solver "$dir/resume.prototxt" --snapshot "$snap" --threads 2 > "$work/resume.txt" ||
  fail "resuming from the interrupted run's snapshot failed"
grep -q "resumed from .* at iteration $iter" "$work/resume.txt" || { cat "$work/resume.txt"; fail "did not resume at $iter"; }
"$strata" test --model "$dir/train.prototxt" --weights "${snap%.solverstate.safetensors}.safetensors" \
  --iterations 1 --threads 2 > "$work/score.txt" || fail "strata test on the snapshot failed"
grep -q "accuracy = " "$work/score.txt" || fail "no accuracy from strata test"

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

echo "== SIGHUP to strata launch --nproc 2 --servers 1 (parameter server, SYNC)"
make_solver "$dir/ps.prototxt" "ps/digits"
start_run "$work/ps" "$dir/ps/digits_log.jsonl" "$strata" launch --nproc 2 --servers 1 -- \
  "$strata" train --solver "$dir/ps.prototxt" --ps-mode SYNC --threads 1
kill -HUP "$bg_pid"
wait_run
[ "$rc" -eq 129 ] || { cat "$work/ps.err" "$work/ps.txt"; fail "launcher exit status $rc, expected 129"; }
grep -q "^\[rank 2\] server 0 .*gradients applied" "$work/ps.txt" || { cat "$work/ps.txt"; fail "the server did not end"; }
snap=$(sed -n 's/^\[rank 0\] snapshot: //p' "$work/ps.txt" | tail -n 1)
[ -n "$snap" ] || { cat "$work/ps.txt"; fail "worker 0 wrote no snapshot"; }
grep -q "^\[rank 1\] snapshot: " "$work/ps.txt" && fail "worker 1 wrote a snapshot too"
tail -n 2 "$dir/ps/digits_log.jsonl" | grep -q '"status":"interrupted"' || fail "no interrupted finish in the log"
[ ! -e "$dir/ps/digits.lock" ] || fail "the lock file was left behind"
case "$snap" in /*) ;; *) snap="$dir/$snap" ;; esac
iter=$(echo "$snap" | sed -n 's/.*_iter_\([0-9]*\)\.solverstate\.safetensors$/\1/p')
[ -n "$iter" ] || fail "unexpected snapshot name $snap"
sed -e "s|^max_iter:.*|max_iter: $((iter + 3))|" "$dir/ps.prototxt" > "$dir/ps_resume.prototxt"
"$strata" launch --nproc 2 --servers 1 -- "$strata" train --solver "$dir/ps_resume.prototxt" --ps-mode SYNC \
  --snapshot "$snap" --threads 1 > "$work/ps_resume.txt" 2>&1 || { cat "$work/ps_resume.txt"; fail "resume failed"; }
grep -q "^\[rank 0\] resumed from .* at iteration $iter" "$work/ps_resume.txt" ||
  { cat "$work/ps_resume.txt"; fail "did not resume at $iter"; }
echo "== Ctrl-Z (SIGTSTP) to strata launch --nproc 2, then SIGCONT"
make_solver "$dir/tstp.prototxt" "tstp/digits"
tstp_log="$dir/tstp/digits_log.jsonl"
start_run "$work/tstp" "$tstp_log" "$strata" launch --nproc 2 --heartbeat 0.5 --heartbeat-timeout 3 -- \
  "$strata" train --solver "$dir/tstp.prototxt" --threads 1
kill -TSTP "$bg_pid"
stopped=0 states=""
for _ in $(seq 1 50); do  # the launcher and its two ranks all stopped (state T)
  ranks=$(pgrep -P "$bg_pid" || true)
  states=$(for p in $bg_pid $ranks; do awk '{print $3}' "/proc/$p/stat" 2> /dev/null; done | sort -u | tr -d '\n')
  if [ "$(echo "$ranks" | wc -w)" -eq 2 ] && [ "$states" = "T" ]; then stopped=1; break; fi
  sleep 0.1
done
[ "$stopped" -eq 1 ] || { cat "$work/tstp.err"; fail "after SIGTSTP the launcher and its ranks are not all stopped (states: $states)"; }
lines=$(wc -l < "$tstp_log")
sleep 6  # twice the heartbeat limit
[ "$(wc -l < "$tstp_log")" -eq "$lines" ] || fail "training went on while the job was suspended"
kill -CONT "$bg_pid"
grew=0
for _ in $(seq 1 100); do
  if [ "$(wc -l < "$tstp_log")" -gt "$lines" ]; then grew=1; break; fi
  sleep 0.1
done
[ "$grew" -eq 1 ] || { cat "$work/tstp.err"; fail "training did not go on after SIGCONT"; }
kill -TERM "$bg_pid"
wait_run
[ "$rc" -eq 143 ] || { cat "$work/tstp.err" "$work/tstp.txt"; fail "launcher exit status $rc after the suspension, expected 143"; }
grep -q "suspended (Ctrl-Z): the ranks are stopped too" "$work/tstp.err" || { cat "$work/tstp.err"; fail "no suspend message"; }
grep -q "continued: the ranks go on" "$work/tstp.err" || { cat "$work/tstp.err"; fail "no continue message"; }
if grep -q "heartbeat" "$work/tstp.err"; then cat "$work/tstp.err"; fail "a rank or the store was named silent after the suspension"; fi
echo "== strata launch --nproc 2 ... | head -n 2"
sed -e 's|^max_iter:.*|max_iter: 200|' -e 's|^snapshot:.*|snapshot: 0|' \
    -e 's|^snapshot_prefix:.*|snapshot_prefix: "head/digits"|' -e 's|^test_interval:.*|test_interval: 0|' \
    -e 's|^display:.*|display: 5|' "$dir/solver.prototxt" > "$dir/head.prototxt"
( rc=0; "$strata" launch --nproc 2 -- "$strata" train --solver "$dir/head.prototxt" --threads 1 \
    2> "$work/head.err" || rc=$?; echo "$rc" > "$work/head.rc" ) | head -n 2 > "$work/head.txt"
[ "$(wc -l < "$work/head.txt")" -eq 2 ] || fail "head did not get its 2 lines"
[ "$(cat "$work/head.rc")" = "0" ] || { cat "$work/head.err"; fail "launcher exit status $(cat "$work/head.rc") under | head, expected 0"; }
grep -q "standard output was closed by its reader" "$work/head.err" || { cat "$work/head.err"; fail "no note on the closed output"; }
tail -n 1 "$dir/head/digits_log.jsonl" | grep -q '"event":"finish".*"status":"completed"' ||
  fail "the job did not train to its end under | head"
echo "== SIGTERM to strata launch --nproc 2 -- strata train --pp 2"
make_solver "$dir/pp.prototxt" "pp/digits"
start_run "$work/pp" "$dir/pp/digits_log.jsonl" "$strata" launch --nproc 2 -- \
  "$strata" train --solver "$dir/pp.prototxt" --pp 2 --micro-batches 2 --threads 1
kill -TERM "$bg_pid"
wait_run 30 "$work/pp.err"  # it once stayed up past 30 s under load: show what the ranks said
[ "$rc" -eq 143 ] || { cat "$work/pp.err" "$work/pp.txt"; fail "launcher exit status $rc, expected 143"; }
steps0=$(sed -n 's/^\[rank 0\] pipeline stage 0: \([0-9]*\) timed steps.*/\1/p' "$work/pp.txt")
steps1=$(sed -n 's/^\[rank 1\] pipeline stage 1: \([0-9]*\) timed steps.*/\1/p' "$work/pp.txt")
[ -n "$steps0" ] && [ "$steps0" = "$steps1" ] || { cat "$work/pp.txt"; fail "the stages stopped after different steps ($steps0, $steps1)"; }
snap=$(sed -n 's/^\[rank 0\] snapshot: //p' "$work/pp.txt" | tail -n 1)
[ -n "$snap" ] || { cat "$work/pp.txt"; fail "no pipeline snapshot"; }
case "$snap" in /*) ;; *) snap="$dir/$snap" ;; esac
iter=$(echo "$snap" | sed -n 's/.*_iter_\([0-9]*\)\.solverstate\.safetensors$/\1/p')
sed -e "s|^max_iter:.*|max_iter: $((iter + 3))|" "$dir/pp.prototxt" > "$dir/pp_resume.prototxt"
"$strata" launch --nproc 2 -- "$strata" train --solver "$dir/pp_resume.prototxt" --pp 2 --micro-batches 2 \
  --snapshot "$snap" --threads 1 > "$work/pp_resume.txt" 2>&1 || { cat "$work/pp_resume.txt"; fail "pipeline resume failed"; }
grep -q "resumed from .* at iteration $iter" "$work/pp_resume.txt" || { cat "$work/pp_resume.txt"; fail "did not resume at $iter"; }
echo "PASS"
