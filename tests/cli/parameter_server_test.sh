#!/usr/bin/env bash
# End-to-end parameter-server training with
# `strata launch --nproc N --servers K -- strata train --ps-mode ...`:
#  1. SYNC with one central server, with 3 sharded servers, and SSP with
#     staleness 0 on shards colocated with the workers: 2 workers with batch
#     64 each give the final weights of 1 process with batch 128 (which the
#     allreduce test shows data parallel gives too), within float tolerance.
#  2. ASYNC on a central server and SSP (staleness 3) on 2 sharded servers
#     train the bundled digits solver to at least 97% test accuracy with 3
#     workers; the start shows who holds what, the log has "ps" lines.
#  3. A worker killed with SIGKILL mid-run: the others finish the run, the
#     launcher and the server name the lost worker, the log's "ps" line lists it.
#  4. The server killed mid-run: every process ends within the timeout
#     naming the server, and the last snapshot resumes.
#  5. A worker whose net differs from worker 0's is refused naming the parameter.
# And SYNC over the rdma transport: one server, and 2 sharded ones with BF16
# gradients on the wire (within 1e-3 of the single process).
# Usage: parameter_server_test.sh STRATA_BINARY SOURCE_DIR
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
if [ -n "${KEEP:-}" ]; then trap - EXIT; echo "work: $work"; fi
fail() { echo "FAIL: $*"; exit 1; }
export STRATA_TIMEOUT_S=10

# shellcheck source=tests/cli/data_parallel_lib.sh
source "$(dirname "$0")/data_parallel_lib.sh"
setup_digits

make_net "$dir/net128.prototxt" 128
make_net "$dir/net64.prototxt" 64
make_solver() {  # make_solver OUT NET MAX_ITER SNAPSHOT PREFIX
  sed -e "s|^net:.*|net: \"$2\"|" \
      -e "s|^max_iter:.*|max_iter: $3|" \
      -e "s|^snapshot:.*|snapshot: $4|" \
      -e "s|^snapshot_prefix:.*|snapshot_prefix: \"$5\"|" \
      -e 's|^warmup_iter:.*|warmup_iter: 3|' \
      -e 's|^test_interval:.*|test_interval: 4|' \
      -e 's|^display:.*|display: 1|' \
      "$dir/solver.prototxt" > "$1"
}
# Final test accuracy of a run's output.
final_accuracy() { grep 'test @' "$1" | tail -n 1 | sed 's/.*accuracy = \([0-9.]*\).*/\1/'; }

echo "== 1 process, batch 128"
make_solver "$dir/single.prototxt" net128.prototxt 8 0 single/digits
"$strata" train --solver "$dir/single.prototxt" --threads 1 > "$work/single.txt"
want="$dir/single/digits_iter_8.safetensors"
[ -f "$want" ] || fail "no final weights: $(cat "$work/single.txt")"

make_solver "$dir/ps.prototxt" net64.prototxt 8 0 ps/digits
for layout in "--servers 1 -- SYNC" "--servers 3 -- SYNC --ps-placement SHARDED" "-- SSP --staleness 0"; do
  launch_flags="${layout%%-- *}"
  train_flags="${layout#*-- }"
  echo "== 2 workers, batch 64 each: launch ${launch_flags:-(no servers)}, --ps-mode $train_flags"
  rm -rf "$dir/ps"
  # shellcheck disable=SC2086
  "$strata" launch --nproc 2 $launch_flags -- "$strata" train --solver "$dir/ps.prototxt" --ps-mode $train_flags \
    > "$work/ps.txt" 2>&1 || { cat "$work/ps.txt"; fail "launch failed"; }
  compare_weights "$want" "$dir/ps/digits_iter_8.safetensors" 1e-4
done
grep -q '^\[rank 0\] parameter server: SSP (staleness 0), 2 shards colocated with the workers, 2 workers, over tcp + shm' "$work/ps.txt" ||
  { cat "$work/ps.txt"; fail "no parameter-server summary"; }

echo "== SYNC over the rdma transport (libfabric's tcp provider)"
rm -rf "$dir/ps"
if STRATA_FABRIC_PROVIDER=tcp "$strata" launch --nproc 2 --servers 1 -- "$strata" train --solver "$dir/ps.prototxt" \
     --ps-mode SYNC --dp-transport rdma > "$work/ps_rdma.txt" 2>&1; then
  grep -q '^\[rank 0\] parameter server: .*, over rdma (' "$work/ps_rdma.txt" ||
    { cat "$work/ps_rdma.txt"; fail "the pairs did not go over the rdma transport"; }
  compare_weights "$want" "$dir/ps/digits_iter_8.safetensors" 1e-4
  # A push moves one transfer per segment, which both ends must cut alike
  # (libfabric matches transfers by size): 2 shards cut fc1.weight, and BF16
  # gradients on the wire move 2 bytes per element.
  echo "== SYNC over rdma, 2 sharded servers, BF16 gradients on the wire"
  rm -rf "$dir/ps"
  STRATA_FABRIC_PROVIDER=tcp "$strata" launch --nproc 2 --servers 2 -- "$strata" train --solver "$dir/ps.prototxt" \
    --ps-mode SYNC --ps-placement SHARDED --ps-compression BF16 --dp-transport rdma > "$work/ps_rdma2.txt" 2>&1 ||
    { cat "$work/ps_rdma2.txt"; fail "the sharded parameter server over rdma failed"; }
  grep -q 'fc1.weight\[' "$work/ps_rdma2.txt" || { cat "$work/ps_rdma2.txt"; fail "no shard cuts a tensor"; }
  compare_weights "$want" "$dir/ps/digits_iter_8.safetensors" 1e-3
elif grep -q 'built without libfabric' "$work/ps_rdma.txt"; then
  echo "  SKIP: this strata was built without libfabric"
else
  cat "$work/ps_rdma.txt"; fail "the parameter server over rdma failed"
fi

echo "== ASYNC, central server, 3 workers: the bundled solver to >= 97%"
sed -e 's|^snapshot_prefix:.*|snapshot_prefix: "async/digits"|' "$dir/solver.prototxt" > "$dir/async.prototxt"
"$strata" launch --nproc 3 --servers 1 -- "$strata" train --solver "$dir/async.prototxt" --ps-mode ASYNC \
  > "$work/async.txt" 2>&1 || { cat "$work/async.txt"; fail "ASYNC run failed"; }
acc=$(final_accuracy "$work/async.txt")
echo "  final test accuracy $acc"
awk -v a="$acc" 'BEGIN { exit !(a >= 0.97) }' || { cat "$work/async.txt"; fail "ASYNC reached $acc < 0.97"; }
grep -q '^\[rank 0\]   server 0 (rank 3): conv1.weight, ' "$work/async.txt" || { cat "$work/async.txt"; fail "no ownership lines"; }
grep -q '^\[rank 3\] server 0 (rank 3 on .*): [0-9]* gradients applied in [0-9]* updates' "$work/async.txt" ||
  { cat "$work/async.txt"; fail "no server summary"; }
grep -q '"event":"ps".*"staleness":\[' "$dir/async/digits_log.jsonl" || fail "no ps line in the log"

echo "== SSP, staleness 3, 2 sharded servers, 3 workers: >= 97%"
sed -e 's|^snapshot_prefix:.*|snapshot_prefix: "ssp/digits"|' "$dir/solver.prototxt" > "$dir/ssp.prototxt"
"$strata" launch --nproc 3 --servers 2 -- "$strata" train --solver "$dir/ssp.prototxt" --ps-mode SSP --staleness 3 \
  > "$work/ssp.txt" 2>&1 || { cat "$work/ssp.txt"; fail "SSP run failed"; }
acc=$(final_accuracy "$work/ssp.txt")
echo "  final test accuracy $acc"
awk -v a="$acc" 'BEGIN { exit !(a >= 0.97) }' || { cat "$work/ssp.txt"; fail "SSP reached $acc < 0.97"; }
grep -q 'server 1 (rank 4): fc1.weight\[' "$work/ssp.txt" || { cat "$work/ssp.txt"; fail "fc1.weight not cut between shards"; }

# The rank's pid among the launcher's children.
rank_pid() {  # rank_pid LAUNCHER_PID RANK
  local child
  for child in $(pgrep -P "$1"); do
    if tr '\0' '\n' < "/proc/$child/environ" 2>/dev/null | grep -qx "STRATA_RANK=$2"; then echo "$child"; return; fi
  done
}
wait_for() {  # wait_for FILE PATTERN: up to 60 s
  for _ in $(seq 600); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    kill -0 "$bg_pid" 2>/dev/null || { cat "$1"; fail "the run ended before '$2'"; }
    sleep 0.1
  done
  cat "$1"; fail "no '$2' after 60 s"
}

echo "== kill worker rank 2 with SIGKILL mid-run (ASYNC, 3 workers, 1 server)"
sed -e 's|^snapshot_prefix:.*|snapshot_prefix: "lostw/digits"|' -e 's|^display:.*|display: 20|' \
    -e 's|^test_interval:.*|test_interval: 0|' -e 's|^max_iter:.*|max_iter: 400|' "$dir/solver.prototxt" > "$dir/lostw.prototxt"
"$strata" launch --nproc 3 --servers 1 -- "$strata" train --solver "$dir/lostw.prototxt" --ps-mode ASYNC \
  > "$work/lostw.txt" 2>&1 &
bg_pid=$!
wait_for "$work/lostw.txt" '^\[rank 0\] iter [0-9]*/400'
victim=$(rank_pid "$bg_pid" 2)
[ -n "$victim" ] || fail "cannot find rank 2"
kill -9 "$victim"
status=0
wait "$bg_pid" || status=$?
bg_pid=""
[ "$status" -eq 0 ] || { cat "$work/lostw.txt"; fail "exit status $status: the others did not finish"; }
grep -q '^\[rank 0\] done: 40[0-9] iterations' "$work/lostw.txt" || { cat "$work/lostw.txt"; fail "the run did not finish"; }
grep -q 'worker rank 2 .*killed by signal 9.*the parameter servers go on with the 2 other workers' "$work/lostw.txt" ||
  { cat "$work/lostw.txt"; fail "the launcher did not name the lost worker"; }
grep -q '^\[rank 3\] server 0 .*: lost worker 2 (rank 2)' "$work/lostw.txt" || { cat "$work/lostw.txt"; fail "the server did not name it"; }
tail -n 3 "$dir/lostw/digits_log.jsonl" | grep -q '"event":"ps".*"lost":\["worker 2 (rank 2)' ||
  fail "the log's last ps line does not list worker 2: $(tail -n 3 "$dir/lostw/digits_log.jsonl")"

echo "== kill the server mid-run; resume from the last snapshot"
sed -e 's|^snapshot_prefix:.*|snapshot_prefix: "losts/digits"|' -e 's|^display:.*|display: 20|' \
    -e 's|^snapshot:.*|snapshot: 40|' -e 's|^test_interval:.*|test_interval: 0|' -e 's|^max_iter:.*|max_iter: 100000|' \
    "$dir/solver.prototxt" > "$dir/losts.prototxt"
# The ranks ignore the launcher's SIGTERM (an ignored signal stays ignored
# across exec), so that the workers show their own reaction to the dead server.
"$strata" launch --nproc 2 --servers 1 --timeout 10 -- bash -c 'trap "" TERM; exec "$0" "$@"' \
  "$strata" train --solver "$dir/losts.prototxt" --ps-mode ASYNC > "$work/losts.txt" 2>&1 &
bg_pid=$!
wait_for "$work/losts.txt" 'snapshot @ '
server=$(rank_pid "$bg_pid" 2)
[ -n "$server" ] || fail "cannot find the server (rank 2)"
start=$(date +%s)
kill -9 "$server"
for _ in $(seq 250); do kill -0 "$bg_pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$bg_pid" 2>/dev/null; then cat "$work/losts.txt"; fail "still running 25 s after the server died"; fi
status=0
wait "$bg_pid" || status=$?
bg_pid=""
echo "  exit status $status after $(( $(date +%s) - start )) s"
[ "$status" -ne 0 ] || { cat "$work/losts.txt"; fail "exit status 0 after the server died"; }
grep -q 'rank 2 .*killed by signal 9' "$work/losts.txt" || { cat "$work/losts.txt"; fail "the launcher did not name the server"; }
grep -qE '^\[rank [01]\] strata train: error: .*server 0 \(rank 2\)' "$work/losts.txt" ||
  { cat "$work/losts.txt"; fail "no worker named the lost server"; }
snap=$(ls "$dir/losts/"*_iter_*.solverstate.safetensors | sort -V | tail -n 1)
it=$(echo "$snap" | sed 's/.*_iter_\([0-9]*\)\.solverstate.*/\1/')
sed -i -e "s|^max_iter:.*|max_iter: $((it + 40))|" "$dir/losts.prototxt"
"$strata" launch --nproc 2 --servers 1 -- "$strata" train --solver "$dir/losts.prototxt" --ps-mode ASYNC \
  --snapshot "$snap" > "$work/resume.txt" 2>&1 || { cat "$work/resume.txt"; fail "resume failed"; }
grep -q "^\[rank 0\] resumed from .* at iteration $it" "$work/resume.txt" || { cat "$work/resume.txt"; fail "did not resume at $it"; }
grep -q "^\[rank 0\] done: $((it + 40)) iterations" "$work/resume.txt" || { cat "$work/resume.txt"; fail "resumed run did not finish"; }
# The snapshot of a parameter-server run loads in one process too.
"$strata" train --solver "$dir/losts.prototxt" --snapshot "$snap" --threads 1 > "$work/resume1.txt" 2>&1 ||
  { cat "$work/resume1.txt"; fail "one process could not resume the parameter-server snapshot"; }

echo "== a worker with a different net"
sed -e 's|num_output: 64|num_output: 32|' "$dir/net64.prototxt" > "$dir/other.prototxt"
make_solver "$dir/other_solver.prototxt" other.prototxt 8 0 other/digits
"$strata" launch --nproc 2 --servers 1 -- bash -c \
  'if [ "$STRATA_RANK" = 1 ]; then s="$1"; else s="$2"; fi; exec "$0" train --solver "$s" --ps-mode SYNC "$3"' \
  "$strata" "$dir/other_solver.prototxt" "$dir/ps.prototxt" --overwrite > "$work/other.txt" 2>&1 && fail "a mismatched net was accepted"
grep -q 'worker 1 built a different net than worker 0 (parameter [0-9]*: ' "$work/other.txt" ||
  { cat "$work/other.txt"; fail "no message naming the differing parameter"; }
echo "PASS"
