#!/usr/bin/env bash
# End-to-end pipeline-parallel training with `strata launch ... -- strata train --pp N`:
#  1. pp 2 (stages from `stage:` keys), 4 micro-batches of 16, both schedules
#     == 1 process with batch 16 and iter_size 4 (the digits net without
#     dropout or shuffling): the same loss at every logged iteration and the
#     same final weights, in one file with the unsplit net's header.
#  2. The pipeline's snapshot resumes in one process; a pp 2 run resumes
#     from its own snapshot at iteration 4 of 8 bit-exactly (same weights
#     and losses as the run that wrote it).
#  2b. TEST phase under pp 2: the TEST outputs rank 0 logs (from the last
#     stage) equal those of one process.
#  3. dp 2 x pp 2 (4 ranks): the grid table is printed and training matches
#     1 process with batch 32 and iter_size 2. pp 2 x tp 2 (models/tp_mlp):
#     the snapshot holds whole tensors and matches 1 process with iter_size
#     2; resuming it gives the same final weights bit for bit.
#  4. Stages chosen by the balancer when the net has no `stage:` keys.
#  5. --max-memory: a cap the whole net exceeds fails with a message naming
#     --pp; the same cap trains on 2 stages.
# Usage: pipeline_test.sh STRATA_BINARY SOURCE_DIR
set -euo pipefail
strata="$1"
src="$2"
work=$(mktemp -d)
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
if [ -n "${KEEP:-}" ]; then trap - EXIT; echo "work: $work"; fi
fail() { echo "FAIL: $*"; exit 1; }
export STRATA_TIMEOUT_S=20

# shellcheck source=tests/cli/data_parallel_lib.sh
source "$(dirname "$0")/data_parallel_lib.sh"
setup_digits

make_net "$dir/net16.prototxt" 16
make_net "$dir/net32.prototxt" 32
# Stage 1 starts at conv3 (and every layer after it).
sed -e 's|name: "conv3"  type: "Convolution"|name: "conv3"  stage: 1  type: "Convolution"|' "$dir/net16.prototxt" \
  > "$dir/net16_staged.prototxt"
grep -q 'stage: 1' "$dir/net16_staged.prototxt" || fail "could not add stage keys"
make_solver() {  # make_solver OUT NET ITER_SIZE PREFIX
  sed -e "s|^net:.*|net: \"$2\"|" \
      -e "s|^max_iter:.*|max_iter: 8\niter_size: $3|" \
      -e 's|^snapshot:.*|snapshot: 0|' \
      -e "s|^snapshot_prefix:.*|snapshot_prefix: \"$4\"|" \
      -e 's|^warmup_iter:.*|warmup_iter: 3|' \
      -e 's|^test_interval:.*|test_interval: 0|' \
      -e 's|^display:.*|display: 1|' \
      "$dir/solver.prototxt" > "$1"
}
make_solver "$dir/single.prototxt" net16.prototxt 4 single/digits
make_solver "$dir/single32.prototxt" net32.prototxt 2 single32/digits
make_solver "$dir/pp.prototxt" net16_staged.prototxt 1 pp/digits
make_solver "$dir/auto.prototxt" net16.prototxt 1 auto/digits

echo "== 1 process, batch 16, iter_size 4"
"$strata" train --solver "$dir/single.prototxt" --threads 1 > "$work/single.txt" 2>&1 ||
  { cat "$work/single.txt"; fail "one-process run failed"; }
want="$dir/single/digits_iter_8.safetensors"
[ -f "$want" ] || fail "no final weights: $(cat "$work/single.txt")"

for schedule in gpipe 1f1b; do
  echo "== pp 2, 4 micro-batches of 16, $schedule"
  rm -rf "$dir/pp"
  "$strata" launch --nproc 2 -- "$strata" train --solver "$dir/pp.prototxt" --pp 2 --micro-batches 4 \
    --schedule "$schedule" > "$work/pp.txt" 2>&1 || { cat "$work/pp.txt"; fail "pp 2 $schedule failed"; }
  compare_weights "$want" "$dir/pp/digits_iter_8.safetensors" 1e-4
  compare_losses "$dir/single/digits_log.jsonl" "$dir/pp/digits_log.jsonl" 1e-4
done
grep -q '^\[rank 0\] process grid dp 1 x pp 2 x tp 1' "$work/pp.txt" || { cat "$work/pp.txt"; fail "no grid table"; }
grep -q "^\[rank 0\] pipeline: 2 stages, 4 micro-batches, ONE_F_ONE_B" "$work/pp.txt" ||
  { cat "$work/pp.txt"; fail "no pipeline summary"; }
grep -q "^\[rank 1\] rank 1 (dp 0, pp 1, tp 0) memory: params" "$work/pp.txt" ||
  { cat "$work/pp.txt"; fail "no per-rank memory report"; }

echo "== the pipeline's snapshot resumes in one process"
sed -e 's|^max_iter:.*|max_iter: 9|' -e 's|snapshot_prefix:.*|snapshot_prefix: "resumed/digits"|' \
  "$dir/single.prototxt" > "$dir/resume.prototxt"
"$strata" train --solver "$dir/resume.prototxt" --snapshot "$dir/pp/digits_iter_8.solverstate.safetensors" \
  --threads 1 > "$work/resume.txt" 2>&1 || { cat "$work/resume.txt"; fail "resume in one process failed"; }
grep -q "resumed from .* at iteration 8" "$work/resume.txt" || { cat "$work/resume.txt"; fail "no resume line"; }

echo "== pp 2 resumes from its own snapshot at iteration 4 of 8 bit-exactly"
sed -e 's|^snapshot:.*|snapshot: 4|' -e 's|snapshot_prefix:.*|snapshot_prefix: "pphalf/digits"|' \
  "$dir/pp.prototxt" > "$dir/pphalf.prototxt"
sed -e 's|snapshot_prefix:.*|snapshot_prefix: "ppres/digits"|' "$dir/pp.prototxt" > "$dir/ppres.prototxt"
"$strata" launch --nproc 2 -- "$strata" train --solver "$dir/pphalf.prototxt" --pp 2 --micro-batches 4 \
  > "$work/pphalf.txt" 2>&1 || { cat "$work/pphalf.txt"; fail "pp 2 with a snapshot at 4 failed"; }
"$strata" launch --nproc 2 -- "$strata" train --solver "$dir/ppres.prototxt" --pp 2 --micro-batches 4 \
  --snapshot "$dir/pphalf/digits_iter_4.solverstate.safetensors" > "$work/ppres.txt" 2>&1 ||
  { cat "$work/ppres.txt"; fail "pp 2 resume failed"; }
grep -q "resumed from .* at iteration 4" "$work/ppres.txt" || { cat "$work/ppres.txt"; fail "no resume line"; }
! grep -q "solver settings differ" "$work/ppres.txt" || { cat "$work/ppres.txt"; fail "settings differ"; }
compare_weights "$dir/pphalf/digits_iter_8.safetensors" "$dir/ppres/digits_iter_8.safetensors" 0
diff <(losses "$dir/pphalf/digits_log.jsonl" | tail -n 4) <(losses "$dir/ppres/digits_log.jsonl") ||
  fail "the resumed run's losses differ from the uninterrupted run's"

echo "== TEST phase under pp 2: the same TEST outputs as one process"
sed -e 's|^test_interval:.*|test_interval: 4|' -e 's|snapshot_prefix:.*|snapshot_prefix: "single_t/digits"|' \
  "$dir/single.prototxt" > "$dir/single_t.prototxt"
sed -e 's|^test_interval:.*|test_interval: 4|' -e 's|snapshot_prefix:.*|snapshot_prefix: "pp_t/digits"|' \
  "$dir/pp.prototxt" > "$dir/pp_t.prototxt"
"$strata" train --solver "$dir/single_t.prototxt" --threads 1 > "$work/single_t.txt" 2>&1 ||
  { cat "$work/single_t.txt"; fail "one-process run with TEST failed"; }
"$strata" launch --nproc 2 -- "$strata" train --solver "$dir/pp_t.prototxt" --pp 2 --micro-batches 4 \
  > "$work/pp_t.txt" 2>&1 || { cat "$work/pp_t.txt"; fail "pp 2 with TEST failed"; }
grep -q "^\[rank 0\] TEST phase every 4 iterations" "$work/pp_t.txt" || { cat "$work/pp_t.txt"; fail "no TEST note"; }
# "name":value pairs of every test line, one a line.
test_outputs() { grep '"event":"test"' "$1" | sed 's/.*"outputs":{\([^}]*\)}.*/\1/' | tr ',' '\n'; }
[ "$(test_outputs "$dir/single_t/digits_log.jsonl" | wc -l)" -ge 6 ] || fail "too few TEST outputs in one process"
paste -d: <(test_outputs "$dir/single_t/digits_log.jsonl") <(test_outputs "$dir/pp_t/digits_log.jsonl") |
  awk -F: '{ if ($1 != $3) bad++; d = $2 - $4; if (d < 0) d = -d; if (d > 1e-4) bad++; n++ }
           END { printf "  %d TEST outputs compared\n", n; exit bad > 0 }' ||
  fail "TEST outputs differ: $(paste <(test_outputs "$dir/single_t/digits_log.jsonl") \
    <(test_outputs "$dir/pp_t/digits_log.jsonl") | tr '\n' ' ')"

echo "== dp 2 x pp 2 (4 ranks) == 1 process with batch 32, iter_size 2"
"$strata" train --solver "$dir/single32.prototxt" --threads 1 > "$work/single32.txt" 2>&1 ||
  { cat "$work/single32.txt"; fail "one-process run failed"; }
make_solver "$dir/dppp.prototxt" net16_staged.prototxt 1 dppp/digits
"$strata" launch --nproc 4 -- "$strata" train --solver "$dir/dppp.prototxt" --pp 2 --micro-batches 2 \
  --threads 1 > "$work/dppp.txt" 2>&1 || { cat "$work/dppp.txt"; fail "dp 2 x pp 2 failed"; }
grep -q '^\[rank 0\]   rank 3: dp 1  pp 1  tp 0' "$work/dppp.txt" || { cat "$work/dppp.txt"; fail "no grid mapping"; }
compare_weights "$dir/single32/digits_iter_8.safetensors" "$dir/dppp/digits_iter_8.safetensors" 1e-4
compare_losses "$dir/single32/digits_log.jsonl" "$dir/dppp/digits_log.jsonl" 1e-4
for shard in GRADIENTS PARAMETERS; do
  echo "== dp 2 x pp 2, --shard $shard along dp == 1 process"
  make_solver "$dir/dppp_$shard.prototxt" net16_staged.prototxt 1 "dppp_$shard/digits"
  "$strata" launch --nproc 4 -- "$strata" train --solver "$dir/dppp_$shard.prototxt" --pp 2 --micro-batches 2 \
    --threads 1 --shard "$shard" --bucket-mb 0.01 > "$work/dppp_$shard.txt" 2>&1 ||
    { cat "$work/dppp_$shard.txt"; fail "dp 2 x pp 2 --shard $shard failed"; }
  grep -q "shard $shard: rank r owns slice r of every bucket" "$work/dppp_$shard.txt" ||
    { cat "$work/dppp_$shard.txt"; fail "no slicing line with --shard $shard"; }
  compare_weights "$dir/single32/digits_iter_8.safetensors" "$dir/dppp_$shard/digits_iter_8.safetensors" 1e-4
  compare_losses "$dir/single32/digits_log.jsonl" "$dir/dppp_$shard/digits_log.jsonl" 1e-4
done

echo "== pp 2 x tp 2 (models/tp_mlp): one snapshot with whole tensors, == 1 process; resumes bit-exactly"
cp -r "$src/models/tp_mlp" "$work/models/tp_mlp"
tpdir="$work/models/tp_mlp"
sed -e 's|^max_iter:.*|max_iter: 8\niter_size: 2|' -e 's|^snapshot:.*|snapshot: 4|' -e 's|^display:.*|display: 1|' \
  -e 's|^test_interval:.*|test_interval: 0|' -e 's|snapshot_prefix:.*|snapshot_prefix: "ref/tp_mlp"|' \
  "$tpdir/solver.prototxt" > "$tpdir/ref.prototxt"
sed -e 's|^iter_size:.*|iter_size: 1|' -e 's|snapshot_prefix:.*|snapshot_prefix: "pptp/tp_mlp"|' \
  "$tpdir/ref.prototxt" > "$tpdir/pptp.prototxt"
sed -e 's|snapshot_prefix:.*|snapshot_prefix: "pptp_res/tp_mlp"|' "$tpdir/pptp.prototxt" > "$tpdir/pptp_res.prototxt"
"$strata" train --solver "$tpdir/ref.prototxt" --threads 1 > "$work/tpref.txt" 2>&1 ||
  { cat "$work/tpref.txt"; fail "tp_mlp in one process failed"; }
"$strata" launch --nproc 4 -- "$strata" train --solver "$tpdir/pptp.prototxt" --pp 2 --tp 2 --micro-batches 2 \
  --threads 1 > "$work/pptp.txt" 2>&1 || { cat "$work/pptp.txt"; fail "pp 2 x tp 2 failed"; }
compare_weights "$tpdir/ref/tp_mlp_iter_8.safetensors" "$tpdir/pptp/tp_mlp_iter_8.safetensors" 1e-4
"$strata" launch --nproc 4 -- "$strata" train --solver "$tpdir/pptp_res.prototxt" --pp 2 --tp 2 --micro-batches 2 \
  --threads 1 --snapshot "$tpdir/pptp/tp_mlp_iter_4.solverstate.safetensors" > "$work/pptp_res.txt" 2>&1 ||
  { cat "$work/pptp_res.txt"; fail "pp 2 x tp 2 resume failed"; }
compare_weights "$tpdir/pptp/tp_mlp_iter_8.safetensors" "$tpdir/pptp_res/tp_mlp_iter_8.safetensors" 0

echo "== stages from the balancer"
"$strata" launch --nproc 2 -- "$strata" train --solver "$dir/auto.prototxt" --pp 2 --micro-batches 2 \
  > "$work/auto.txt" 2>&1 || { cat "$work/auto.txt"; fail "balanced pipeline failed"; }
grep -q "pipeline stages chosen automatically from the forward+backward time" "$work/auto.txt" ||
  { cat "$work/auto.txt"; fail "no balancer report"; }
grep -q "predicted balance: slowest stage / mean stage = " "$work/auto.txt" || { cat "$work/auto.txt"; fail "no balance"; }

echo "== --max-memory: too small for the whole net, enough for each of 2 stages"
# A parameter-heavy MLP: 3 x (parameters + gradients + momentum) is about
# 16 MiB in one process; stage 0 (fc1, fc2) needs about 9.5 MiB, stage 1 about 7.
cat > "$dir/wide.prototxt" <<'NET'
name: "wide"
layer {
  name: "data"  type: "ArrayData"  top: "data"  top: "label"
  array_data_param { source: "../../data/digits/train_images.npy"
                     label_source: "../../data/digits/train_labels.npy" batch_size: 16 shuffle: false }
}
layer { name: "fc1" type: "InnerProduct" bottom: "data" top: "fc1" inner_product_param { num_output: 768 } }
layer { name: "relu1" type: "ReLU" bottom: "fc1" top: "fc1" }
layer { name: "fc2" type: "InnerProduct" bottom: "fc1" top: "fc2" inner_product_param { num_output: 768 } }
layer { name: "relu2" type: "ReLU" bottom: "fc2" top: "fc2" }
layer { name: "fc3" type: "InnerProduct" bottom: "fc2" top: "fc3" stage: 1 inner_product_param { num_output: 768 } }
layer { name: "relu3" type: "ReLU" bottom: "fc3" top: "fc3" }
layer { name: "fc4" type: "InnerProduct" bottom: "fc3" top: "fc4" inner_product_param { num_output: 10 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc4" bottom: "label" top: "loss" }
NET
make_solver "$dir/wide_solver.prototxt" wide.prototxt 1 wide/digits
# No final snapshot: the writing rank gathers every stage's parameters for it.
echo "snapshot_after_train: false" >> "$dir/wide_solver.prototxt"
cap=12M
if "$strata" train --solver "$dir/wide_solver.prototxt" --max-memory "$cap" --threads 1 > "$work/cap1.txt" 2>&1; then
  cat "$work/cap1.txt"; fail "one process trained under --max-memory $cap"
fi
grep -q "over the cap of 12.0 MiB; split the model over more ranks with --pp" "$work/cap1.txt" ||
  { cat "$work/cap1.txt"; fail "no helpful out-of-memory message"; }
# One micro-batch: each stage keeps one copy of its activations (further
# micro-batch slots briefly allocate their own parameters before sharing them).
"$strata" launch --nproc 2 -- "$strata" train --solver "$dir/wide_solver.prototxt" --pp 2 --micro-batches 1 \
  --max-memory "$cap" > "$work/cap2.txt" 2>&1 || { cat "$work/cap2.txt"; fail "2 stages did not fit under $cap"; }
grep "memory: params" "$work/cap2.txt"
echo "PASS"
