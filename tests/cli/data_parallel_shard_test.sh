#!/usr/bin/env bash
# Sharded data parallel (--shard, ZeRO stages 1 to 3) through
# `strata launch --nproc 2 -- strata train` on the bundled digits:
#  1. shard OPTIMIZER, GRADIENTS and PARAMETERS over the tcp and shm transports train to
#     the weights plain data parallel reaches, bit for bit (two ranks add the
#     same two gradients in either reduction), with the same logged losses;
#  2. the start lines print the slicing and what each rank holds (stage 3:
#     its slice of the weights, and what it gathers while layers run);
#  3. the snapshot state a sharded run writes is the plain run's, byte for
#     byte (rank 0 gathers the whole optimizer state); a snapshot written with
#     sharding resumes without it (and one written without it resumes with
#     it) to the same weights as the run that never stopped;
#  4. one process with --shard trains and notes that it holds everything;
#  5. a rank killed mid-training under PARAMETERS (a gather before every
#     layer): rank 0 ends with an error naming rank 1, within the timeout;
#  6. refusals: an unknown stage (from the flag and from the solver file,
#     naming file and line); a note where a grid leaves one replica.
# Every launch runs under STRATA_TIMEOUT_S and `timeout`, so nothing waits forever.
# Usage: data_parallel_shard_test.sh STRATA_BINARY SOURCE_DIR
set -euo pipefail
strata="$1"
src="$2"
fail() { echo "FAIL: $*"; exit 1; }
export STRATA_TIMEOUT_S=10

# shellcheck source=tests/cli/data_parallel_lib.sh
source "$(dirname "$0")/data_parallel_lib.sh"  # $work, removed at exit
setup_digits
make_net "$dir/net64.prototxt" 64
make_solver() {  # make_solver OUT MAX_ITER SNAPSHOT PREFIX [EXTRA LINE]
  sed -e "s|^net:.*|net: \"net64.prototxt\"|" \
      -e "s|^max_iter:.*|max_iter: $2|" \
      -e "s|^snapshot:.*|snapshot: $3|" \
      -e "s|^snapshot_prefix:.*|snapshot_prefix: \"$4\"|" \
      -e 's|^warmup_iter:.*|warmup_iter: 3|' \
      -e 's|^test_interval:.*|test_interval: 4|' \
      -e 's|^display:.*|display: 1|' \
      "$dir/solver.prototxt" > "$1"
  if [ $# -ge 5 ]; then echo "$5" >> "$1"; fi
}
launch() {  # launch OUT ARGS...: strata train on 2 ranks
  local out="$1"
  shift
  timeout 120 "$strata" launch --nproc 2 -- "$strata" train --threads 1 --dp-backend tcp "$@" > "$out" 2>&1
}
make_solver "$dir/plain.prototxt" 8 0 plain/digits
make_solver "$dir/zero.prototxt" 8 0 zero/digits

echo "== plain data parallel, 2 ranks"
launch "$work/plain.txt" --solver "$dir/plain.prototxt" || { cat "$work/plain.txt"; fail "plain run failed"; }
want="$dir/plain/digits_iter_8.safetensors"
[ -f "$want" ] || fail "no final weights: $(cat "$work/plain.txt")"

for shard in OPTIMIZER GRADIENTS PARAMETERS; do
  for transport in tcp shm; do
    for buckets in "" "--bucket-mb 0.01"; do
      echo "== shard $shard, transport $transport ${buckets:-(one bucket)}"
      rm -rf "$dir/zero"
      # shellcheck disable=SC2086
      launch "$work/zero.txt" --solver "$dir/zero.prototxt" --shard "$shard" --dp-transport "$transport" $buckets ||
        { cat "$work/zero.txt"; fail "sharded run failed"; }
      compare_weights "$want" "$dir/zero/digits_iter_8.safetensors" 0
      compare_losses "$dir/plain/digits_log.jsonl" "$dir/zero/digits_log.jsonl" 0
    done
  done
done

echo "== the start lines"
grep -q "^\[rank 0\] data parallel: 2 ranks, tcp backend.*shard PARAMETERS" "$work/zero.txt" ||
  { cat "$work/zero.txt"; fail "the data-parallel line does not name the shard stage"; }
grep -q "^\[rank 0\]   rank 0 holds parameters .* + up to .* gathered while layers run, gradients" "$work/zero.txt" ||
  { cat "$work/zero.txt"; fail "stage 3's memory line does not say what is gathered while layers run"; }
grep -q "^\[rank 0\] shard PARAMETERS: rank r owns slice r of every bucket" "$work/zero.txt" ||
  { cat "$work/zero.txt"; fail "no slicing line"; }
grep -q "^\[rank 0\]   bucket 0 ([0-9]* values): rank 0 \[0, [0-9]*) .*, rank 1 \[" "$work/zero.txt" ||
  { cat "$work/zero.txt"; fail "the slicing does not show both ranks' ranges"; }
for r in 0 1; do
  grep -q "^\[rank 0\]   rank $r holds parameters .*, gradients .* reduce buffers, optimizer state" "$work/zero.txt" ||
    { cat "$work/zero.txt"; fail "no memory line for rank $r"; }
done
grep -q "^\[rank 0\]   (plain data parallel: parameters" "$work/zero.txt" ||
  { cat "$work/zero.txt"; fail "no comparison with plain data parallel"; }

echo "== snapshots across layouts"
# max_iter stays 8 (the cosine rate depends on it); the snapshots at 4 are the resume points.
make_solver "$dir/zero_half.prototxt" 8 4 zhalf/digits
make_solver "$dir/plain_half.prototxt" 8 4 phalf/digits
launch "$work/zhalf.txt" --solver "$dir/zero_half.prototxt" --shard OPTIMIZER ||
  { cat "$work/zhalf.txt"; fail "sharded run with a snapshot failed"; }
launch "$work/phalf.txt" --solver "$dir/plain_half.prototxt" ||
  { cat "$work/phalf.txt"; fail "plain run with a snapshot failed"; }
# Rank 0 gathered every rank's slice: the state file is the plain run's, byte for byte.
cmp -s "$dir/zhalf/digits_iter_4.solverstate.safetensors" "$dir/phalf/digits_iter_4.solverstate.safetensors" ||
  fail "the sharded run's snapshot state differs from the plain run's"
compare_weights "$want" "$dir/zhalf/digits_iter_8.safetensors" 0
make_solver "$dir/resume_plain.prototxt" 8 0 rplain/digits
make_solver "$dir/resume_zero.prototxt" 8 0 rzero/digits
launch "$work/rplain.txt" --solver "$dir/resume_plain.prototxt" \
  --snapshot "$dir/zhalf/digits_iter_4.solverstate.safetensors" ||
  { cat "$work/rplain.txt"; fail "resuming a sharded snapshot without sharding failed"; }
compare_weights "$want" "$dir/rplain/digits_iter_8.safetensors" 0
launch "$work/rzero.txt" --solver "$dir/resume_zero.prototxt" --shard GRADIENTS \
  --snapshot "$dir/phalf/digits_iter_4.solverstate.safetensors" ||
  { cat "$work/rzero.txt"; fail "resuming a plain snapshot with sharding failed"; }
compare_weights "$want" "$dir/rzero/digits_iter_8.safetensors" 0

echo "== one process: a note, and the run goes on"
rm -rf "$dir/zero"
timeout 120 "$strata" train --threads 1 --solver "$dir/zero.prototxt" --shard OPTIMIZER > "$work/one.txt" 2>&1 ||
  { cat "$work/one.txt"; fail "one process with --shard failed"; }
grep -q "^note: shard OPTIMIZER slices state over data-parallel ranks" "$work/one.txt" ||
  { cat "$work/one.txt"; fail "no note that one process holds everything"; }

echo "== stage 3 from the solver file, with a snapshot: the whole weights and state, resumed plain"
make_solver "$dir/stage3.prototxt" 8 4 s3/digits "parallel { data { shard: PARAMETERS } }"
launch "$work/s3.txt" --solver "$dir/stage3.prototxt" || { cat "$work/s3.txt"; fail "shard: PARAMETERS from the solver file failed"; }
cmp -s "$dir/s3/digits_iter_4.solverstate.safetensors" "$dir/phalf/digits_iter_4.solverstate.safetensors" ||
  fail "the stage-3 run's snapshot state differs from the plain run's"
compare_weights "$dir/phalf/digits_iter_4.safetensors" "$dir/s3/digits_iter_4.safetensors" 0
compare_weights "$want" "$dir/s3/digits_iter_8.safetensors" 0
make_solver "$dir/resume3.prototxt" 8 0 r3/digits
launch "$work/r3.txt" --solver "$dir/resume3.prototxt" --shard PARAMETERS \
  --snapshot "$dir/phalf/digits_iter_4.solverstate.safetensors" ||
  { cat "$work/r3.txt"; fail "resuming a plain snapshot with shard PARAMETERS failed"; }
compare_weights "$want" "$dir/r3/digits_iter_8.safetensors" 0

echo "== shard PARAMETERS: rank 1 killed mid-training (gathers before every layer)"
make_solver "$dir/long.prototxt" 1000000 0 long/digits
sed -i -e 's|^test_interval:.*|test_interval: 0|' -e 's|^display:.*|display: 20|' "$dir/long.prototxt"
# The ranks ignore the launcher's SIGTERM, so that rank 0 shows its own
# reaction to the dead peer (as cli.data_parallel does).
"$strata" launch --nproc 2 --timeout 10 -- bash -c 'trap "" TERM; exec "$0" "$@"' \
  "$strata" train --solver "$dir/long.prototxt" --threads 1 --shard PARAMETERS --bucket-mb 0.01 \
  > "$work/long.txt" 2>&1 &
bg_pid=$!
wait_for_line "$work/long.txt" "^\[rank 0\] iter 20/"  # it trains
rank1=$(rank_pid "$bg_pid" 1)
kill -9 "$rank1"
wait_run 25 "$work/long.txt"
[ "$rc" -ne 0 ] || { cat "$work/long.txt"; fail "exit status 0 after a rank died"; }
grep -E '^\[rank 0\] strata train: error: .*rank 1' "$work/long.txt" ||
  { cat "$work/long.txt"; fail "rank 0 did not report an error naming rank 1"; }

echo "== refusals"
make_solver "$dir/stage9.prototxt" 8 0 s9/digits "parallel { data { shard: EVERYTHING } }"
if launch "$work/s9.txt" --solver "$dir/stage9.prototxt"; then fail "shard: EVERYTHING was accepted"; fi
grep -q "shard at .*stage9.prototxt:[0-9]*:[0-9]*: shard must be one of" "$work/s9.txt" ||
  { cat "$work/s9.txt"; fail "the solver file's refusal does not name the file and line"; }
# pp 2 on 2 ranks leaves one replica: nothing to slice, and it says so.
make_solver "$dir/grid.prototxt" 8 0 grid/digits
launch "$work/grid.txt" --solver "$dir/grid.prototxt" --shard PARAMETERS --pp 2 ||
  { cat "$work/grid.txt"; fail "--shard PARAMETERS --pp 2 on 2 ranks failed"; }
grep -q "note: shard PARAMETERS slices state over data-parallel ranks; this grid has one (dp 1)" "$work/grid.txt" ||
  { cat "$work/grid.txt"; fail "no note that a grid without a dp axis holds everything"; }
if launch "$work/bad.txt" --solver "$dir/zero.prototxt" --shard ALL; then fail "--shard ALL was accepted"; fi
grep -q -- "--shard: shard must be one of NONE, OPTIMIZER, GRADIENTS, PARAMETERS" "$work/bad.txt" ||
  { cat "$work/bad.txt"; fail "the unknown stage's error does not list the stages"; }
echo "PASS"
