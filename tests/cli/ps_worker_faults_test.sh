#!/usr/bin/env bash
# Parameter-server workers that stop or die, under
# `strata launch --nproc 2 --servers 1` with short heartbeats (every 0.5 s,
# a 3 s limit):
#  1. kill -STOP of worker 1 (ASYNC, then SYNC): the launcher names it as
#     silent within the heartbeat limit and kills it, the server drops it,
#     worker 0 finishes the run and the launcher exits 0 (it waited forever
#     for ASYNC and every rank stalled for SYNC).
#  2. Heartbeats off: a stopped worker 1 is dropped by the server after
#     the timeout (--timeout 5), and once the server ended the launcher kills it
#     instead of waiting for it.
#  3. kill -9 of worker 0, which tests, logs and writes the snapshots: the
#     job ends within seconds, non-zero, and the launcher names the last
#     snapshot to resume from (the run went on without it and exited 0).
#  4. SIGTERM to strata launch while worker 1 is stopped (SYNC): the job
#     stops within seconds, worker 0 writes its snapshot, and the launcher
#     exits 143, not the status of the worker it killed (it waited forever).
# Usage: ps_worker_faults_test.sh STRATA_BINARY SOURCE_DIR
set -euo pipefail
strata="$1"
src="$2"
fail() { echo "FAIL: $*"; exit 1; }
# shellcheck source=tests/cli/digits_lib.sh
source "$(dirname "$0")/digits_lib.sh"  # $work, setup_digits
setup_digits
cd "$dir"
export STRATA_TIMEOUT_S=60
hb=(--heartbeat 0.5 --heartbeat-timeout 3)
victim=""
trap 'if [ -n "$victim" ]; then kill -9 "$victim" 2>/dev/null || true; fi; digits_cleanup' EXIT

make_solver() {  # make_solver OUT MAX_ITER SNAPSHOT PREFIX
  sed -e "s|^max_iter:.*|max_iter: $2|" -e "s|^snapshot:.*|snapshot: $3|" \
      -e "s|^snapshot_prefix:.*|snapshot_prefix: \"$4\"|" -e 's|^test_interval:.*|test_interval: 0|' \
      -e 's|^display:.*|display: 10|' solver.prototxt > "$1"
}
now_ms() { date +%s%3N; }
rank_pid() {  # rank_pid LAUNCHER_PID RANK: the rank's pid among the launcher's children
  local child
  for child in $(pgrep -P "$1"); do
    if tr '\0' '\n' < "/proc/$child/environ" 2>/dev/null | grep -qx "STRATA_RANK=$2"; then echo "$child"; return; fi
  done
}
# launch_bg OUT LAUNCH_FLAGS... -- TRAIN_ARGS...: strata launch in the
# background ($bg_pid); returns once rank 0 printed a progress line.
launch_bg() {
  local out="$1"
  shift
  "$strata" launch "$@" > "$out" 2>&1 &
  bg_pid=$!
  for _ in $(seq 600); do
    grep -q '^\[rank 0\] iter [0-9]*/' "$out" && return 0
    kill -0 "$bg_pid" 2>/dev/null || { cat "$out"; fail "the run ended before it trained"; }
    sleep 0.1
  done
  cat "$out"; fail "no progress line after 60 s"
}
# when_named OUT PATTERN START_MS: milliseconds from START_MS until PATTERN
# appeared in OUT (polled while the launcher runs), in $named_ms.
when_named() {
  named_ms=""
  for _ in $(seq 300); do
    if grep -qE "$2" "$1"; then named_ms=$(( $(now_ms) - $3 )); return 0; fi
    kill -0 "$bg_pid" 2>/dev/null || break
    sleep 0.1
  done
  grep -qE "$2" "$1" || { cat "$1"; fail "nothing matching '$2'"; }
  named_ms=$(( $(now_ms) - $3 ))
}

for mode in ASYNC SYNC; do
  echo "== 1. kill -STOP of worker 1 ($mode)"
  make_solver "stop_$mode.prototxt" 100 0 "stop_$mode/digits"
  out="$work/stop_$mode.txt"
  launch_bg "$out" "${hb[@]}" --nproc 2 --servers 1 -- "$strata" train --solver "stop_$mode.prototxt" \
    --ps-mode "$mode" --threads 1
  victim=$(rank_pid "$bg_pid" 1)
  [ -n "$victim" ] || fail "cannot find worker rank 1"
  start=$(now_ms)
  kill -STOP "$victim"
  when_named "$out" 'strata launch: rank 1 on .* sent no heartbeat for .*; killing it' "$start"
  echo "  worker 1 named and killed $named_ms ms after it was stopped"
  wait_run 60 "$out"
  victim=""
  [ "$rc" -eq 0 ] || { cat "$out"; fail "exit status $rc: worker 0 did not finish without worker 1"; }
  # The limit is 3 s; the launcher looks every 0.25 s.
  [ "$named_ms" -lt 8000 ] || { cat "$out"; fail "worker 1 named after $named_ms ms (the limit is 3 s)"; }
  grep -q '^\[rank 0\] done: 1[0-9][0-9] iterations' "$out" || { cat "$out"; fail "worker 0 did not finish the run"; }
  grep -q 'worker rank 1 exited .*killed by signal 9.*go on with the 1 other worker' "$out" ||
    { cat "$out"; fail "the launcher did not say it goes on without worker 1"; }
  grep -q '^\[rank 2\] server 0 .*: lost worker 1 (rank 1)' "$out" || { cat "$out"; fail "the server did not drop worker 1"; }
done

echo "== 2. heartbeats off: the launcher does not wait for a worker the servers gave up"
make_solver orphan.prototxt 100 0 orphan/digits
out="$work/orphan.txt"
launch_bg "$out" --timeout 5 --heartbeat-timeout 0 --nproc 2 --servers 1 -- "$strata" train \
  --solver orphan.prototxt --ps-mode ASYNC --threads 1
victim=$(rank_pid "$bg_pid" 1)
[ -n "$victim" ] || fail "cannot find worker rank 1"
kill -STOP "$victim"
wait_run 60 "$out"
victim=""
[ "$rc" -eq 0 ] || { cat "$out"; fail "exit status $rc without worker 1"; }
grep -q '^\[rank 2\] server 0 .*: lost worker 1 (rank 1)' "$out" || { cat "$out"; fail "the server did not drop worker 1"; }
grep -q 'worker rank 1 is still running .* after every parameter server ended.*; killing it' "$out" ||
  { cat "$out"; fail "the launcher did not name the worker it stopped waiting for"; }

echo "== 3. kill -9 of worker 0"
make_solver w0.prototxt 1000000 20 w0/digits
out="$work/w0.txt"
launch_bg "$out" "${hb[@]}" --nproc 2 --servers 1 -- "$strata" train --solver w0.prototxt --ps-mode ASYNC \
  --threads 1
for _ in $(seq 300); do grep -q '^\[rank 0\] snapshot @ ' "$out" && break; sleep 0.1; done
grep -q '^\[rank 0\] snapshot @ ' "$out" || { cat "$out"; fail "no snapshot after 30 s"; }
worker0=$(rank_pid "$bg_pid" 0)
[ -n "$worker0" ] || fail "cannot find worker rank 0"
start=$(now_ms)
kill -9 "$worker0"
wait_run 30 "$out"
took=$(( $(now_ms) - start ))
echo "  the job ended $took ms after worker 0 was killed, exit status $rc"
[ "$rc" -ne 0 ] || { cat "$out"; fail "exit status 0 after worker 0 died"; }
[ "$took" -lt 10000 ] || { cat "$out"; fail "the job ended $took ms after worker 0 died"; }
line=$(grep 'strata launch: rank 0 exited .*killed by signal 9' "$out" || true)
[ -n "$line" ] || { cat "$out"; fail "the launcher did not name worker 0"; }
echo "  $line"
grep -q 'worker 0 tests, logs and writes the snapshots' <<<"$line" || fail "no reason given: $line"
snap=$(sed -n 's/.*--snapshot \([^ ;]*\); stopping the other ranks$/\1/p' <<<"$line")
# The last one written, or the one before when the kill came between its
# line and its announcement.
last=$(sed -n 's/^\[rank 0\] snapshot @ [0-9]*: \(.*\)\.safetensors$/\1.solverstate.safetensors/p' "$out" | tail -n 2)
[ -n "$snap" ] && grep -qxF "$snap" <<<"$last" || { cat "$out"; fail "named snapshot '$snap', the last written: $last"; }
[ -f "$snap" ] || fail "the named snapshot $snap does not exist"

echo "== 4. SIGTERM to strata launch while worker 1 is stopped (SYNC)"
make_solver term.prototxt 1000000 0 term/digits
out="$work/term.txt"
launch_bg "$out" "${hb[@]}" --nproc 2 --servers 1 -- "$strata" train --solver term.prototxt --ps-mode SYNC \
  --threads 1
victim=$(rank_pid "$bg_pid" 1)
[ -n "$victim" ] || fail "cannot find worker rank 1"
kill -STOP "$victim"
start=$(now_ms)
kill -TERM "$bg_pid"
wait_run 30 "$out"
victim=""
took=$(( $(now_ms) - start ))
echo "  the job stopped $took ms after SIGTERM, exit status $rc"
[ "$rc" -eq 143 ] || { cat "$out"; fail "exit status $rc after SIGTERM, expected 143"; }
[ "$took" -lt 10000 ] || { cat "$out"; fail "the job stopped $took ms after SIGTERM"; }
grep -q '^\[rank 0\] snapshot: term/digits_iter_[0-9]*\.solverstate\.safetensors' "$out" ||
  { cat "$out"; fail "worker 0 wrote no snapshot"; }
grep -q 'strata launch: rank 1 on .* sent no heartbeat' "$out" || { cat "$out"; fail "worker 1 was not named"; }
echo "PASS"
