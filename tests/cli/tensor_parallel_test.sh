#!/usr/bin/env bash
# End-to-end tensor-parallel training with `strata launch ... -- strata train --tp 2`
# on models/tp_mlp (a convolution split by output channels, a COLUMN/ROW MLP pair):
#  1. tp 2 == 1 process: the same loss at every logged iteration and the
#     same final weights (the tp run's weights file holds full tensors, with
#     the same header as the one-process file), within float tolerance.
#  2. dp 2 x tp 2 (4 ranks, batch 32 per data-parallel rank) == 1 process
#     with batch 64; also sharded along dp (--shard GRADIENTS, OPTIMIZER,
#     PARAMETERS),
#     whose snapshots resume unsharded on the same grid to the same weights.
#  3. A tp 2 snapshot resumes in one process, and a one-process snapshot
#     resumes on tp 2, both ending with the one-process weights.
# Usage: tensor_parallel_test.sh STRATA_BINARY SOURCE_DIR
set -euo pipefail
strata="$1"
src="$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -n "${KEEP:-}" ]; then trap - EXIT; echo "work: $work"; fi
fail() { echo "FAIL: $*"; exit 1; }
export STRATA_TIMEOUT_S=10

# shellcheck source=tests/cli/data_parallel_lib.sh
source "$(dirname "$0")/data_parallel_lib.sh"
mkdir -p "$work/models" "$work/data"
cp -r "$src/models/tp_mlp" "$work/models/tp_mlp"
rm -rf "$work/models/tp_mlp/snapshots"
cp -r "$src/data/digits" "$work/data/digits"
dir="$work/models/tp_mlp"

# No shuffling (the ranks of a data-parallel run read interleaved shards).
net() {  # net OUT BATCH
  sed -e 's|shuffle: true|shuffle: false|' -e "0,/batch_size: 64/s//batch_size: $2/" "$dir/train.prototxt" > "$1"
  grep -q "batch_size: $2" "$1" || fail "could not set the batch size in $1"
}
net "$dir/net64.prototxt" 64
net "$dir/net32.prototxt" 32
solver() {  # solver OUT NET MAX_ITER SNAPSHOT PREFIX
  sed -e "s|^net:.*|net: \"$2\"|" \
      -e "s|^max_iter:.*|max_iter: $3|" \
      -e "s|^snapshot:.*|snapshot: $4|" \
      -e "s|^snapshot_prefix:.*|snapshot_prefix: \"$5\"|" \
      -e 's|^warmup_iter:.*|warmup_iter: 3|' \
      -e 's|^test_interval:.*|test_interval: 4|' \
      -e 's|^display:.*|display: 1|' \
      "$dir/solver.prototxt" > "$1"
}
solver "$dir/single.prototxt" net64.prototxt 8 4 single/tp
solver "$dir/tp.prototxt" net64.prototxt 8 4 tp/tp
solver "$dir/dptp.prototxt" net32.prototxt 8 0 dptp/tp

echo "== 1 process, batch 64"
"$strata" train --solver "$dir/single.prototxt" --threads 1 > "$work/single.txt" 2>&1 ||
  { cat "$work/single.txt"; fail "one-process run failed"; }
want="$dir/single/tp_iter_8.safetensors"
[ -f "$want" ] || fail "no final weights: $(cat "$work/single.txt")"

echo "== tp 2"
"$strata" launch --nproc 2 -- "$strata" train --solver "$dir/tp.prototxt" --tp 2 > "$work/tp.txt" 2>&1 ||
  { cat "$work/tp.txt"; fail "tp 2 launch failed"; }
compare_losses "$dir/single/tp_log.jsonl" "$dir/tp/tp_log.jsonl" 1e-4
compare_weights "$want" "$dir/tp/tp_iter_8.safetensors" 1e-4

echo "== dp 2 x tp 2, batch 32 per data-parallel rank"
"$strata" launch --nproc 4 -- "$strata" train --solver "$dir/dptp.prototxt" --tp 2 > "$work/dptp.txt" 2>&1 ||
  { cat "$work/dptp.txt"; fail "dp 2 x tp 2 launch failed"; }
compare_losses "$dir/single/tp_log.jsonl" "$dir/dptp/tp_log.jsonl" 1e-4
compare_weights "$want" "$dir/dptp/tp_iter_8.safetensors" 1e-4

echo "== dp 2 x tp 2 sharded along dp (GRADIENTS, OPTIMIZER, PARAMETERS): the same weights; the snapshot resumes unsharded"
for stage in GRADIENTS OPTIMIZER PARAMETERS; do
  solver "$dir/dptp_$stage.prototxt" net32.prototxt 8 4 "dptp_$stage/tp"
  "$strata" launch --nproc 4 -- "$strata" train --solver "$dir/dptp_$stage.prototxt" --tp 2 --shard "$stage" \
    --bucket-mb 0.01 > "$work/dptp_$stage.txt" 2>&1 || { cat "$work/dptp_$stage.txt"; fail "dp 2 x tp 2 --shard $stage failed"; }
  grep -q "shard $stage: rank r owns slice r of every bucket" "$work/dptp_$stage.txt" ||
    { cat "$work/dptp_$stage.txt"; fail "no slicing line with --shard $stage"; }
  compare_losses "$dir/single/tp_log.jsonl" "$dir/dptp_$stage/tp_log.jsonl" 1e-4
  compare_weights "$want" "$dir/dptp_$stage/tp_iter_8.safetensors" 1e-4
  # Resumed unsharded on the same grid (the data order goes on: same ranks).
  solver "$dir/resume_$stage.prototxt" net32.prototxt 8 0 "resume_$stage/tp"
  "$strata" launch --nproc 4 -- "$strata" train --solver "$dir/resume_$stage.prototxt" --tp 2 \
    --snapshot "$dir/dptp_$stage/tp_iter_4.solverstate.safetensors" > "$work/resume_$stage.txt" 2>&1 ||
    { cat "$work/resume_$stage.txt"; fail "the --shard $stage grid snapshot did not resume unsharded"; }
  compare_weights "$want" "$dir/resume_$stage/tp_iter_8.safetensors" 1e-4
done

echo "== the tp 2 snapshot at 4 resumed in one process"
rm -rf "$dir/resume1"
solver "$dir/resume1.prototxt" net64.prototxt 8 0 resume1/tp
"$strata" train --solver "$dir/resume1.prototxt" --snapshot "$dir/tp/tp_iter_4.solverstate.safetensors" \
  --threads 1 > "$work/resume1.txt" 2>&1 || { cat "$work/resume1.txt"; fail "resume in one process failed"; }
compare_weights "$want" "$dir/resume1/tp_iter_8.safetensors" 1e-4

echo "== the one-process snapshot at 4 resumed on tp 2"
solver "$dir/resume2.prototxt" net64.prototxt 8 0 resume2/tp
"$strata" launch --nproc 2 -- "$strata" train --solver "$dir/resume2.prototxt" --tp 2 \
  --snapshot "$dir/single/tp_iter_4.solverstate.safetensors" > "$work/resume2.txt" 2>&1 ||
  { cat "$work/resume2.txt"; fail "resume on tp 2 failed"; }
compare_weights "$want" "$dir/resume2/tp_iter_8.safetensors" 1e-4

echo "PASS"
