#!/usr/bin/env bash
# End-to-end data-parallel training with `strata launch ... -- strata train`:
#  1. 2 ranks with batch 64 each == 1 process with batch 128 (the digits net
#     without dropout, no shuffling): same loss at every logged iteration
#     and the same final weights, within float tolerance; with the tcp ring
#     and tree allreduce, overlapped and not.
#  2. Only rank 0 prints; its progress lines show the world size, per-rank
#     and total throughput and the communication wait.
#  3. Resume of a 2-rank snapshot with 1 rank and with 3 ranks.
#  4. A rank killed with SIGKILL mid-training: the run ends non-zero well
#     within the timeout, naming the rank, and the last snapshot written
#     before the kill is untouched and still resumes.
#  5. --dp-transport rdma (libfabric's tcp provider, as there is no RDMA
#     device here) trains to the same weights as the tcp transport; without
#     a provider named, rdma is an error that names what libfabric found.
# Usage: data_parallel_test.sh STRATA_BINARY SOURCE_DIR
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
# 8 iterations stay inside the first epoch of every rank's shard (1437 samples).
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
make_solver "$dir/single.prototxt" net128.prototxt 8 0 single/digits
make_solver "$dir/dp.prototxt" net64.prototxt 8 0 dp/digits


echo "== 1 process, batch 128"
"$strata" train --solver "$dir/single.prototxt" --threads 1 > "$work/single.txt"
want="$dir/single/digits_iter_8.safetensors"
[ -f "$want" ] || fail "no final weights: $(cat "$work/single.txt")"

for algo in ring tree; do
  for overlap in "" "--no-overlap --bucket-mb 0.05"; do
    echo "== 2 ranks, batch 64 each, tcp $algo ${overlap:-(overlapped, one bucket)}"
    rm -rf "$dir/dp"
    # shellcheck disable=SC2086
    "$strata" launch --nproc 2 -- "$strata" train --solver "$dir/dp.prototxt" --dp-backend tcp \
      --dp-algorithm "$algo" $overlap > "$work/dp.txt" 2>&1 || { cat "$work/dp.txt"; fail "launch failed"; }
    compare_weights "$want" "$dir/dp/digits_iter_8.safetensors" 1e-4
    compare_losses "$dir/single/digits_log.jsonl" "$dir/dp/digits_log.jsonl" 1e-4
    if [ "$algo" = ring ] && [ -z "$overlap" ]; then cp "$dir/dp/digits_iter_8.safetensors" "$work/tcp_ring.safetensors"; fi
  done
done

echo "== 2 ranks over the rdma transport (libfabric's tcp provider)"
rm -rf "$dir/dp"
if STRATA_FABRIC_PROVIDER=tcp "$strata" launch --nproc 2 -- "$strata" train --solver "$dir/dp.prototxt" \
     --dp-backend tcp --dp-algorithm ring --dp-transport rdma > "$work/rdma.txt" 2>&1; then
  grep -q '^\[rank 0\] data parallel: 2 ranks, tcp backend over rdma (libfabric tcp' "$work/rdma.txt" ||
    { cat "$work/rdma.txt"; fail "the run does not say it went over the rdma transport"; }
  # The same ring over another transport adds in the same order: identical weights.
  compare_weights "$work/tcp_ring.safetensors" "$dir/dp/digits_iter_8.safetensors" 0
  compare_losses "$dir/single/digits_log.jsonl" "$dir/dp/digits_log.jsonl" 1e-4
  echo "== rdma asked through strata launch, no provider named"
  if "$strata" launch --nproc 2 --dp-transport rdma -- "$strata" train --solver "$dir/dp.prototxt" \
       > "$work/rdma_none.txt" 2>&1; then
    echo "  this machine has an RDMA device: the run used it"
  else
    grep -q 'found no RDMA device.*it found: .*tcp.*STRATA_FABRIC_PROVIDER=tcp' "$work/rdma_none.txt" ||
      { cat "$work/rdma_none.txt"; fail "no clear error for rdma without an RDMA device"; }
  fi
elif grep -q 'built without libfabric' "$work/rdma.txt"; then
  echo "  SKIP: this strata was built without libfabric"
else
  cat "$work/rdma.txt"
  fail "training over the rdma transport failed"
fi

echo "== output of a 2-rank run"
grep -q '^\[rank 0\] data parallel: 2 ranks, tcp backend' "$work/dp.txt" || { cat "$work/dp.txt"; fail "no data-parallel summary"; }
grep '^\[rank 0\] iter 8/8' "$work/dp.txt" | grep -q 'samples/s/rank .* samples/s total (2 ranks)  comm wait [0-9]*%' ||
  { cat "$work/dp.txt"; fail "progress lines lack the throughput and communication share"; }
grep -q '^\[rank 0\] test @ 8: accuracy' "$work/dp.txt" || { cat "$work/dp.txt"; fail "no test results"; }
! grep -q '^\[rank 1\]' "$work/dp.txt" || { cat "$work/dp.txt"; fail "rank 1 printed something"; }

echo "== resume a 2-rank snapshot with 1 rank and with 3 ranks"
make_solver "$dir/dp_snap.prototxt" net64.prototxt 6 3 snap2/digits
"$strata" launch --nproc 2 -- "$strata" train --solver "$dir/dp_snap.prototxt" > "$work/snap2.txt" 2>&1 ||
  { cat "$work/snap2.txt"; fail "2-rank run with snapshots failed"; }
state="$dir/snap2/digits_iter_3.solverstate.safetensors"
[ -f "$state" ] || fail "no 2-rank snapshot at iteration 3: $(ls "$dir/snap2")"
make_solver "$dir/resume1.prototxt" net64.prototxt 6 0 resume1/digits
"$strata" train --solver "$dir/resume1.prototxt" --snapshot "$state" --threads 1 > "$work/resume1.txt" 2>&1 ||
  { cat "$work/resume1.txt"; fail "resume with 1 rank failed"; }
grep -q 'written by 2 data-parallel ranks and this run has 1; the data order restarts' "$work/resume1.txt" ||
  { cat "$work/resume1.txt"; fail "no note about the data order"; }
grep -q '^done: 6 iterations' "$work/resume1.txt" || { cat "$work/resume1.txt"; fail "1-rank resume did not finish"; }
make_solver "$dir/resume3.prototxt" net64.prototxt 6 0 resume3/digits
"$strata" launch --nproc 3 -- "$strata" train --solver "$dir/resume3.prototxt" --snapshot "$state" > "$work/resume3.txt" 2>&1 ||
  { cat "$work/resume3.txt"; fail "resume with 3 ranks failed"; }
grep -q 'written by 2 data-parallel ranks and this run has 3' "$work/resume3.txt" || { cat "$work/resume3.txt"; fail "no note (3 ranks)"; }
grep -q '^\[rank 0\] done: 6 iterations' "$work/resume3.txt" || { cat "$work/resume3.txt"; fail "3-rank resume did not finish"; }
# And with 2 ranks again: no note, the data continues.
make_solver "$dir/resume2.prototxt" net64.prototxt 6 0 resume2/digits
"$strata" launch --nproc 2 -- "$strata" train --solver "$dir/resume2.prototxt" --snapshot "$state" > "$work/resume2.txt" 2>&1 ||
  { cat "$work/resume2.txt"; fail "resume with 2 ranks failed"; }
! grep -q 'note: the snapshot was written by' "$work/resume2.txt" || fail "2-rank resume printed a world-size note"
compare_weights "$dir/snap2/digits_iter_6.safetensors" "$dir/resume2/digits_iter_6.safetensors" 0

echo "== kill rank 1 with SIGKILL mid-training"
make_solver "$dir/long.prototxt" net64.prototxt 1000000 5 long/digits
sed -i -e 's|^test_interval:.*|test_interval: 0|' -e 's|^display:.*|display: 50|' "$dir/long.prototxt"
# The ranks ignore the launcher's SIGTERM (an ignored signal stays ignored
# across exec), so that rank 0 shows its own reaction to the dead peer.
"$strata" launch --nproc 2 --timeout 10 -- bash -c 'trap "" TERM; exec "$0" "$@"' \
  "$strata" train --solver "$dir/long.prototxt" > "$work/long.txt" 2>&1 &
bg_pid=$!
# Wait for a complete snapshot, then for the next one to start, so that the
# kill lands mid-training.
snap=""
for _ in $(seq 300); do
  snap=$(ls "$dir/long/"*_iter_*.solverstate.safetensors 2>/dev/null | sort -V | tail -n 1 || true)
  [ -n "$snap" ] && break
  kill -0 "$bg_pid" 2>/dev/null || { cat "$work/long.txt"; fail "the run ended early"; }
  sleep 0.1
done
[ -n "$snap" ] || fail "no snapshot after 30 s"
weights="${snap%.solverstate.safetensors}.safetensors"
sums=$(md5sum "$snap" "$weights")
rank1=$(rank_pid "$bg_pid" 1)
start=$(date +%s)
kill -9 "$rank1"
status=0
# The launcher must end well within STRATA_TIMEOUT_S plus its kill grace.
for _ in $(seq 250); do
  kill -0 "$bg_pid" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$bg_pid" 2>/dev/null; then cat "$work/long.txt"; fail "still running 25 s after rank 1 died"; fi
wait "$bg_pid" || status=$?
bg_pid=""
echo "  exit status $status after $(( $(date +%s) - start )) s"
[ "$status" -ne 0 ] || { cat "$work/long.txt"; fail "exit status 0 after a rank died"; }
grep -q 'rank 1' "$work/long.txt" || { cat "$work/long.txt"; fail "no message naming rank 1"; }
grep -E '^\[rank 0\] strata train: error: .*rank 1' "$work/long.txt" ||
  { cat "$work/long.txt"; fail "rank 0 did not report an error naming rank 1"; }
[ "$sums" = "$(md5sum "$snap" "$weights")" ] || fail "the snapshot $snap changed after the kill"
last=$(ls "$dir/long/"*_iter_*.solverstate.safetensors | sort -V | tail -n 1)
it=$(echo "$last" | sed 's/.*_iter_\([0-9]*\)\.solverstate.*/\1/')
make_solver "$dir/after.prototxt" net64.prototxt $((it + 2)) 0 after/digits
"$strata" train --solver "$dir/after.prototxt" --snapshot "$last" --threads 1 > "$work/after.txt" 2>&1 ||
  { cat "$work/after.txt"; fail "the last snapshot ($last) does not resume"; }
echo "PASS"
