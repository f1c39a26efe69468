#!/usr/bin/env bash
# The rough edges a new user of parallel runs hits, each ending in a clear
# message well within the 300 s default timeout:
#  1. `strata launch ... -- strata train` runs this build's strata when
#     `strata` is not on PATH, and also when another `strata` is.
#  2. --pp / --tp in one process without a launcher says which
#     `strata launch --nproc N` to use.
#  3. --tp 2 on a net without `split:` keys warns that it runs replicated.
#  4. Under --pp the start line shows every stage's memory.
#  5. kill -STOP of one rank mid-training: the job fails naming that rank in
#     seconds (heartbeats), not after the timeout.
#  6. Ranks started by hand as mpirun or srun would (rank 0 serves the
#     store, no launcher to stop the others): a ConfigError on rank 1 alone
#     stops rank 0 at once, naming rank 1; a rank with a wrong token fails
#     every rank at once.
# Usage: parallel_pitfalls_test.sh STRATA_BINARY SOURCE_DIR
set -euo pipefail
strata="$1"
src="$2"
work=$(mktemp -d)
bg_pids=()
cleanup() {
  for p in "${bg_pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
if [ -n "${KEEP:-}" ]; then trap - EXIT; echo "work: $work"; fi
fail() { echo "FAIL: $*"; exit 1; }
# The default: every check below must end far sooner.
export STRATA_TIMEOUT_S=300
unset STRATA_HEARTBEAT_S STRATA_HEARTBEAT_TIMEOUT_S

# shellcheck source=tests/cli/data_parallel_lib.sh
source "$(dirname "$0")/data_parallel_lib.sh"
setup_digits
cd "$dir"
make_solver() {  # make_solver OUT MAX_ITER PREFIX
  sed -e "s|^max_iter:.*|max_iter: $2|" \
      -e 's|^snapshot:.*|snapshot: 0|' \
      -e "s|^snapshot_prefix:.*|snapshot_prefix: \"$3\"|" \
      -e 's|^test_interval:.*|test_interval: 0|' \
      -e 's|^display:.*|display: 10|' \
      solver.prototxt > "$1"
}
make_solver short.prototxt 4 short/digits
elapsed() { echo "$(( $(date +%s%N) / 1000000 - $1 ))"; }  # milliseconds since $1
now_ms() { echo "$(( $(date +%s%N) / 1000000 ))"; }

echo "== 1. launch -- strata, with strata not on PATH"
bin="$work/bin"
mkdir -p "$bin"
# Only the tools the ranks need; no strata among them.
for tool in bash sh; do ln -s "$(command -v $tool)" "$bin/$tool"; done
PATH="$bin" "$strata" launch --nproc 2 -- strata train --solver short.prototxt --overwrite --threads 1 > "$work/path.txt" 2>&1 ||
  { cat "$work/path.txt"; fail "launch -- strata failed without strata on PATH"; }
grep -q '^\[rank 0\] done: 4 iterations' "$work/path.txt" || { cat "$work/path.txt"; fail "no training output"; }
echo "== 1b. and with another strata first on PATH"
printf '#!/bin/sh\necho "the strata on PATH ran"\nexit 3\n' > "$bin/strata"
chmod +x "$bin/strata"
rm -rf short
PATH="$bin:$PATH" "$strata" launch --nproc 2 -- strata train --solver short.prototxt --overwrite --threads 1 \
  > "$work/path2.txt" 2>&1 || { cat "$work/path2.txt"; fail "launch -- strata ran the strata on PATH"; }
! grep -q "the strata on PATH ran" "$work/path2.txt" || fail "the strata on PATH ran"

echo "== 2. --pp / --tp in one process"
status=0
"$strata" train --solver short.prototxt --overwrite --pp 2 > "$work/pp1.txt" 2>&1 || status=$?
[ "$status" -eq 1 ] || { cat "$work/pp1.txt"; fail "--pp 2 in one process: status $status"; }
grep -q 'strata launch --nproc 2 -- strata train --solver short.prototxt --pp 2' "$work/pp1.txt" ||
  { cat "$work/pp1.txt"; fail "--pp 2 in one process does not suggest strata launch --nproc 2"; }
status=0
"$strata" train --solver short.prototxt --overwrite --pp 2 --tp 2 > "$work/pptp1.txt" 2>&1 || status=$?
[ "$status" -eq 1 ] || { cat "$work/pptp1.txt"; fail "--pp 2 --tp 2 in one process: status $status"; }
grep -q 'strata launch --nproc 4 -- strata train --solver short.prototxt --pp 2 --tp 2' "$work/pptp1.txt" ||
  { cat "$work/pptp1.txt"; fail "--pp 2 --tp 2 in one process does not suggest --nproc 4"; }

echo "== 3. --tp 2 without split: keys warns"
rm -rf short
"$strata" launch --nproc 2 -- strata train --solver short.prototxt --overwrite --tp 2 --threads 1 > "$work/tp.txt" 2>&1 ||
  { cat "$work/tp.txt"; fail "--tp 2 run failed"; }
grep -q '^\[rank 0\] warning: tp 2: no layer of the net has a `split:` key.*replicated.*split: COLUMN' "$work/tp.txt" ||
  { cat "$work/tp.txt"; fail "no warning for --tp 2 on a net without split keys"; }
[ "$(grep -c 'warning: tp 2' "$work/tp.txt")" -eq 1 ] || fail "the warning is not printed once"
# A net with split keys gets no such warning.
cp -r "$src/models/tp_mlp" "$work/models/tp_mlp"
sed -e 's|^max_iter:.*|max_iter: 2|' -e 's|^snapshot:.*|snapshot: 0|' -e 's|^test_interval:.*|test_interval: 0|' \
  -e 's|snapshot_prefix:.*|snapshot_prefix: "tp_short/mlp"|' "$work/models/tp_mlp/solver.prototxt" \
  > "$work/models/tp_mlp/short.prototxt"
(cd "$work/models/tp_mlp" && "$strata" launch --nproc 2 -- strata train --solver short.prototxt --overwrite --tp 2 \
  --threads 1) > "$work/tp_split.txt" 2>&1 || { cat "$work/tp_split.txt"; fail "tp_mlp --tp 2 failed"; }
! grep -q 'warning: tp' "$work/tp_split.txt" || { cat "$work/tp_split.txt"; fail "warning for a split net"; }

echo "== 4. --pp 2: every stage's memory on the start line"
rm -rf short
"$strata" launch --nproc 2 -- strata train --solver short.prototxt --overwrite --pp 2 --threads 1 > "$work/pp.txt" 2>&1 ||
  { cat "$work/pp.txt"; fail "--pp 2 run failed"; }
grep -E "^\[rank 0\] strata train: .*net 'digits' \(stage 0: parameters [^;]*, total [^;]*; stage 1: parameters [^;]*, total [^;]*; all stages [0-9.]+ [KMG]?i?B\)" \
  "$work/pp.txt" || { cat "$work/pp.txt"; fail "the start line does not show both stages' memory"; }

echo "== 5. kill -STOP of one rank mid-training"
make_solver long.prototxt 10000000 long/digits
"$strata" launch --nproc 2 -- strata train --solver long.prototxt --overwrite --threads 1 > "$work/stop.txt" 2>&1 &
launcher=$!
bg_pids+=("$launcher")
for _ in $(seq 300); do
  grep -q '^\[rank 0\] iter 20/' "$work/stop.txt" && break
  kill -0 "$launcher" 2>/dev/null || { cat "$work/stop.txt"; fail "the run ended early"; }
  sleep 0.1
done
grep -q '^\[rank 0\] iter 20/' "$work/stop.txt" || { cat "$work/stop.txt"; fail "no progress after 30 s"; }
rank1=""
for child in $(pgrep -P "$launcher"); do
  if tr '\0' '\n' < "/proc/$child/environ" 2>/dev/null | grep -qx 'STRATA_RANK=1'; then rank1=$child; fi
done
[ -n "$rank1" ] || fail "cannot find rank 1 among the launcher's children"
bg_pids+=("$rank1")
start=$(now_ms)
kill -STOP "$rank1"
for _ in $(seq 600); do
  kill -0 "$launcher" 2>/dev/null || break
  sleep 0.05
done
took=$(elapsed "$start")
echo "  the job ended $took ms after rank 1 was stopped"
kill -0 "$launcher" 2>/dev/null && { cat "$work/stop.txt"; fail "still running 30 s after rank 1 was stopped"; }
status=0
wait "$launcher" || status=$?
[ "$status" -ne 0 ] || { cat "$work/stop.txt"; fail "exit status 0 after a rank was stopped"; }
grep -q 'strata launch: rank 1 on .* sent no heartbeat for .*stopped' "$work/stop.txt" ||
  { cat "$work/stop.txt"; fail "the launcher did not name rank 1 as stopped"; }
# Heartbeats every 1 s, a 5 s limit: named in about 5 s, well under 10.
[ "$took" -lt 10000 ] || { cat "$work/stop.txt"; fail "took $took ms (the heartbeat limit is 5 s)"; }

# Ranks by hand, with the environment mpirun or srun would give (rank 0
# serves the store): no launcher stops the others when one exits.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
run_rank() {  # run_rank RANK TOKEN OUT ARGS...
  local rank=$1 token=$2 out=$3
  shift 3
  env STRATA_RANK="$rank" STRATA_WORLD_SIZE=2 STRATA_MASTER="127.0.0.1:$port" STRATA_TOKEN="$token" \
    "$strata" train --overwrite "$@" > "$out" 2>&1
}

echo "== 6. a ConfigError on rank 1 alone stops rank 0 at once"
port=$(free_port)
sed -e 's|^net:.*|net: "bad_train.prototxt"|' long.prototxt > bad.prototxt
sed -e '0,/kernel_size: 3/s//kernel_size: 3 no_such_key: 1/' train.prototxt > bad_train.prototxt
grep -q no_such_key bad_train.prototxt || fail "could not break the net for rank 1"
start=$(now_ms)
run_rank 0 tok "$work/r0.txt" --solver long.prototxt --threads 1 &
r0=$!
bg_pids+=("$r0")
s1=0
run_rank 1 tok "$work/r1.txt" --solver bad.prototxt --threads 1 || s1=$?
s0=0
wait "$r0" || s0=$?
took=$(elapsed "$start")
echo "  rank 0 ended $took ms after the start (rank 1: status $s1, rank 0: status $s0)"
[ "$s1" -ne 0 ] && [ "$s0" -ne 0 ] || { cat "$work/r0.txt" "$work/r1.txt"; fail "statuses $s0, $s1"; }
grep -q 'no_such_key' "$work/r1.txt" || { cat "$work/r1.txt"; fail "rank 1 did not report its own error"; }
# Whether rank 0 heard it from the store or saw rank 1's connection close
# first, its error names rank 1's failure.
grep -q 'strata train: error: .*the job failed: rank 1 on .* failed: .*no_such_key' "$work/r0.txt" ||
  { cat "$work/r0.txt"; fail "rank 0 did not name rank 1's failure"; }
[ "$took" -lt 30000 ] || fail "took $took ms"

echo "== 6b. a wrong token on rank 1 fails rank 0 at once"
port=$(free_port)
start=$(now_ms)
run_rank 0 tok "$work/t0.txt" --solver long.prototxt --threads 1 &
r0=$!
bg_pids+=("$r0")
sleep 0.5
s1=0
run_rank 1 another-token "$work/t1.txt" --solver long.prototxt --threads 1 || s1=$?
s0=0
wait "$r0" || s0=$?
took=$(elapsed "$start")
echo "  rank 0 ended $took ms after the start"
[ "$s1" -ne 0 ] && [ "$s0" -ne 0 ] || { cat "$work/t0.txt" "$work/t1.txt"; fail "statuses $s0, $s1"; }
grep -q 'bad token' "$work/t1.txt" || { cat "$work/t1.txt"; fail "rank 1 did not say its token was refused"; }
grep -q 'rank 1 on .* presented a wrong STRATA_TOKEN' "$work/t0.txt" ||
  { cat "$work/t0.txt"; fail "rank 0 did not name rank 1's wrong token"; }
[ "$took" -lt 30000 ] || fail "took $took ms"

echo "PASS"
