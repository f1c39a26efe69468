#!/usr/bin/env bash
# Pipeline and tensor parallelism on GPUs (`strata launch ... -- strata train
# --device cuda --pp/--tp`, over nccl), each compared with one process on one
# GPU, as tests/cli/pipeline_test.sh and tensor_parallel_test.sh do on the CPU:
#  1. pp 2 and pp 3 (stages from `stage:` keys; labels go straight from
#     stage 0 to the last), GPIPE and ONE_F_ONE_B, 4 micro-batches of 16 ==
#     1 GPU process with batch 16 and iter_size 4: the loss at every logged
#     iteration and the final weights within 1e-3 (cuDNN may pick other
#     algorithms in another process; sums over ranks are reassociated).
#  2. tp 2 (models/tp_mlp: a convolution split by output channels, a
#     COLUMN/ROW pair) == 1 GPU process.
#  3. dp 2 x pp 2 (4 ranks) == 1 GPU process with batch 32, iter_size 2;
#     pp 2 x tp 2 (tp_mlp) == 1 GPU process with iter_size 2.
#  4. A pp 2 GPU snapshot (an MLP: cuBLAS only, deterministic) resumes on
#     the GPUs bit-exactly (same final weights and losses as the run that
#     wrote it), and on the CPU: pp 2 over tcp and one CPU process take it.
#  5. --device cuda --pp 2 over another backend than nccl is refused clearly.
# The ranks share GPU 0 when there are fewer GPUs than ranks (each then says
# it is its own host to NCCL, NCCL_HOSTID, and NCCL talks over loopback).
# Exits 77 (skipped) when the build has no CUDA backend or the machine no GPU.
# Usage: model_parallel_gpu_test.sh STRATA_BINARY SOURCE_DIR
set -euo pipefail
strata="$1"
src="$2"
work=$(mktemp -d)
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
if [ -n "${KEEP:-}" ]; then trap - EXIT; echo "work: $work"; fi
fail() { echo "FAIL: $*"; exit 1; }
export STRATA_TIMEOUT_S=${STRATA_TIMEOUT_S:-120}
# Under tools/gpu_tests.py: progress (and every launch's output, as it comes)
# also into files that survive a stop for time.
progress="${STRATA_TEST_PROGRESS_DIR:+$STRATA_TEST_PROGRESS_DIR/model_parallel_gpu}"
if [ -n "$progress" ]; then
  : > "$progress.log"
  : > "$progress.ranks.log"
  exec > >(tee -a "$progress.log") 2>&1
fi

# shellcheck source=tests/cli/data_parallel_lib.sh
source "$(dirname "$0")/data_parallel_lib.sh"
setup_digits

make_net "$dir/net16.prototxt" 16
make_net "$dir/net32.prototxt" 32
# pp 2: stage 1 from conv3 on. pp 3: stage 1 from conv2, stage 2 from fc1.
sed -e 's|name: "conv3"  type: "Convolution"|name: "conv3"  stage: 1  type: "Convolution"|' "$dir/net16.prototxt" \
  > "$dir/net16_pp2.prototxt"
sed -e 's|name: "conv2"  type: "Convolution"|name: "conv2"  stage: 1  type: "Convolution"|' \
    -e 's|name: "fc1"  type: "InnerProduct"|name: "fc1"  stage: 2  type: "InnerProduct"|' "$dir/net16.prototxt" \
  > "$dir/net16_pp3.prototxt"
grep -q 'stage: 1' "$dir/net16_pp2.prototxt" || fail "could not add stage keys (pp 2)"
[ "$(grep -c 'stage: ' "$dir/net16_pp3.prototxt")" = 2 ] || fail "could not add stage keys (pp 3)"
# An MLP on the digits (GEMMs only) for the bit-exact resume.
mlp() {  # mlp OUT BATCH STAGE_KEY
  cat > "$1" <<NET
name: "digits_mlp"
layer {
  name: "data"  type: "ArrayData"  top: "data"  top: "label"
  array_data_param { source: "../../data/digits/train_images.npy" label_source: "../../data/digits/train_labels.npy"
                     batch_size: $2 shuffle: false }
}
layer { name: "fc1"  type: "InnerProduct"  bottom: "data"  top: "fc1"
        inner_product_param { num_output: 64 weight_filler { type: "msra" } } }
layer { name: "relu1"  type: "ReLU"  bottom: "fc1"  top: "fc1" }
layer { name: "fc2"  $3 type: "InnerProduct"  bottom: "fc1"  top: "fc2"
        inner_product_param { num_output: 32 weight_filler { type: "msra" } } }
layer { name: "relu2"  type: "ReLU"  bottom: "fc2"  top: "fc2" }
layer { name: "fc3"  type: "InnerProduct"  bottom: "fc2"  top: "fc3"  inner_product_param { num_output: 10 } }
layer { name: "loss"  type: "SoftmaxWithLoss"  bottom: "fc3"  bottom: "label"  top: "loss" }
NET
}
mlp "$dir/mlp16.prototxt" 16 ""
mlp "$dir/mlp16_pp2.prototxt" 16 "stage: 1"
make_solver() {  # make_solver OUT NET ITER_SIZE PREFIX [SNAPSHOT]
  sed -e "s|^net:.*|net: \"$2\"|" \
      -e "s|^max_iter:.*|max_iter: 8\niter_size: $3|" \
      -e "s|^snapshot:.*|snapshot: ${5:-0}|" \
      -e "s|^snapshot_prefix:.*|snapshot_prefix: \"$4\"|" \
      -e 's|^warmup_iter:.*|warmup_iter: 3|' \
      -e 's|^test_interval:.*|test_interval: 0|' \
      -e 's|^display:.*|display: 1|' \
      "$dir/solver.prototxt" > "$1"
}
make_solver "$dir/single.prototxt" net16.prototxt 4 single/digits
make_solver "$dir/single32.prototxt" net32.prototxt 2 single32/digits

echo "== 1 GPU process, batch 16, iter_size 4"
if ! "$strata" train --solver "$dir/single.prototxt" --device cuda > "$work/single.txt" 2>&1; then
  if grep -Eq 'no CUDA backend|no CUDA device|no GPU|CUDA driver|without CUDA' "$work/single.txt"; then
    echo "SKIP: $(grep -E 'no CUDA backend|no CUDA device|no GPU|CUDA driver|without CUDA' "$work/single.txt" | head -n 1)"
    exit 77
  fi
  cat "$work/single.txt"
  fail "single-GPU training failed"
fi
want="$dir/single/digits_iter_8.safetensors"
[ -f "$want" ] || fail "no final weights: $(cat "$work/single.txt")"

# One GPU per rank where the machine has enough; else every rank says it is
# its own host to NCCL (NCCL refuses two ranks of one communicator on one GPU).
rank_wrapper="$work/rank_wrapper.sh"
cat > "$rank_wrapper" <<'WRAP'
#!/usr/bin/env bash
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${gpus:-0}" -lt "${STRATA_WORLD_SIZE:-2}" ]; then
  export NCCL_HOSTID="strata-mp-gpu-test-rank${STRATA_RANK:-0}" NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 \
         NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo
fi
exec "$@"
WRAP
chmod +x "$rank_wrapper"
gpu_launch() {  # gpu_launch NPROC OUT ARGS...: strata launch of strata train --device cuda
  local n="$1" out="$2"
  shift 2
  echo "  [$(date +%T)] launch --nproc $n: train --device cuda $*"
  if [ -n "$progress" ]; then
    echo "== [$(date +%T)] launch --nproc $n: train --device cuda $*" >> "$progress.ranks.log"
    "$strata" launch --nproc "$n" -- "$rank_wrapper" "$strata" train --device cuda "$@" 2>&1 |
      tee "$out" >> "$progress.ranks.log" || { cat "$out"; fail "launch --nproc $n failed: train $*"; }
    return
  fi
  "$strata" launch --nproc "$n" -- "$rank_wrapper" "$strata" train --device cuda "$@" > "$out" 2>&1 ||
    { cat "$out"; fail "launch --nproc $n failed: train $*"; }
}

for stages in 2 3; do
  make_solver "$dir/pp$stages.prototxt" "net16_pp$stages.prototxt" 1 "pp$stages/digits"
  for schedule in gpipe 1f1b; do
    echo "== pp $stages on GPUs, 4 micro-batches of 16, $schedule"
    rm -rf "$dir/pp$stages"
    gpu_launch "$stages" "$work/pp.txt" --solver "$dir/pp$stages.prototxt" --pp "$stages" --micro-batches 4 \
      --schedule "$schedule"
    grep -q "^\[rank 0\] process grid dp 1 x pp $stages x tp 1" "$work/pp.txt" || { cat "$work/pp.txt"; fail "no grid table"; }
    grep -q "^\[rank 0\] device cuda" "$work/pp.txt" || { cat "$work/pp.txt"; fail "the run was not on a GPU"; }
    compare_weights "$want" "$dir/pp$stages/digits_iter_8.safetensors" 1e-3
    compare_losses "$dir/single/digits_log.jsonl" "$dir/pp$stages/digits_log.jsonl" 1e-3
  done
done

echo "== tp 2 on GPUs (models/tp_mlp) == 1 GPU process"
cp -r "$src/models/tp_mlp" "$work/models/tp_mlp"
rm -rf "$work/models/tp_mlp/snapshots"
tpdir="$work/models/tp_mlp"
sed -e 's|shuffle: true|shuffle: false|' "$tpdir/train.prototxt" > "$tpdir/net.prototxt"
tp_solver() {  # tp_solver OUT ITER_SIZE PREFIX
  sed -e "s|^net:.*|net: \"net.prototxt\"|" -e "s|^max_iter:.*|max_iter: 8\niter_size: $2|" -e 's|^snapshot:.*|snapshot: 0|' \
      -e 's|^display:.*|display: 1|' -e 's|^test_interval:.*|test_interval: 0|' \
      -e "s|snapshot_prefix:.*|snapshot_prefix: \"$3\"|" "$tpdir/solver.prototxt" > "$1"
}
tp_solver "$tpdir/ref.prototxt" 1 ref/tp_mlp
tp_solver "$tpdir/ref2.prototxt" 2 ref2/tp_mlp
tp_solver "$tpdir/tp.prototxt" 1 tp/tp_mlp
tp_solver "$tpdir/pptp.prototxt" 1 pptp/tp_mlp
"$strata" train --solver "$tpdir/ref.prototxt" --device cuda > "$work/tpref.txt" 2>&1 ||
  { cat "$work/tpref.txt"; fail "tp_mlp on one GPU failed"; }
gpu_launch 2 "$work/tp.txt" --solver "$tpdir/tp.prototxt" --tp 2
compare_weights "$tpdir/ref/tp_mlp_iter_8.safetensors" "$tpdir/tp/tp_mlp_iter_8.safetensors" 1e-3
compare_losses "$tpdir/ref/tp_mlp_log.jsonl" "$tpdir/tp/tp_mlp_log.jsonl" 1e-3

echo "== dp 2 x pp 2 on GPUs (4 ranks) == 1 GPU process with batch 32, iter_size 2"
"$strata" train --solver "$dir/single32.prototxt" --device cuda > "$work/single32.txt" 2>&1 ||
  { cat "$work/single32.txt"; fail "one-GPU run with batch 32 failed"; }
make_solver "$dir/dppp.prototxt" net16_pp2.prototxt 1 dppp/digits
gpu_launch 4 "$work/dppp.txt" --solver "$dir/dppp.prototxt" --pp 2 --micro-batches 2
grep -q '^\[rank 0\]   rank 3: dp 1  pp 1  tp 0' "$work/dppp.txt" || { cat "$work/dppp.txt"; fail "no grid mapping"; }
grep -q '^\[rank 0\] data parallel: 2 ranks, nccl backend' "$work/dppp.txt" ||
  { cat "$work/dppp.txt"; fail "data parallelism did not run over nccl"; }
compare_weights "$dir/single32/digits_iter_8.safetensors" "$dir/dppp/digits_iter_8.safetensors" 1e-3
compare_losses "$dir/single32/digits_log.jsonl" "$dir/dppp/digits_log.jsonl" 1e-3

echo "== pp 2 x tp 2 on GPUs (tp_mlp, 4 ranks) == 1 GPU process with iter_size 2"
"$strata" train --solver "$tpdir/ref2.prototxt" --device cuda > "$work/tpref2.txt" 2>&1 ||
  { cat "$work/tpref2.txt"; fail "tp_mlp with iter_size 2 on one GPU failed"; }
gpu_launch 4 "$work/pptp.txt" --solver "$tpdir/pptp.prototxt" --pp 2 --tp 2 --micro-batches 2
compare_weights "$tpdir/ref2/tp_mlp_iter_8.safetensors" "$tpdir/pptp/tp_mlp_iter_8.safetensors" 1e-3
compare_losses "$tpdir/ref2/tp_mlp_log.jsonl" "$tpdir/pptp/tp_mlp_log.jsonl" 1e-3

echo "== a pp 2 GPU snapshot resumes bit-exactly on the GPUs, and on the CPU"
make_solver "$dir/mlphalf.prototxt" mlp16_pp2.prototxt 1 mlphalf/digits 4
make_solver "$dir/mlpres.prototxt" mlp16_pp2.prototxt 1 mlpres/digits
make_solver "$dir/mlpcpu.prototxt" mlp16_pp2.prototxt 1 mlpcpu/digits
make_solver "$dir/mlpone.prototxt" mlp16.prototxt 4 mlpone/digits
gpu_launch 2 "$work/mlphalf.txt" --solver "$dir/mlphalf.prototxt" --pp 2 --micro-batches 4
state="$dir/mlphalf/digits_iter_4.solverstate.safetensors"
[ -f "$state" ] || { cat "$work/mlphalf.txt"; fail "no snapshot at iteration 4"; }
gpu_launch 2 "$work/mlpres.txt" --solver "$dir/mlpres.prototxt" --pp 2 --micro-batches 4 --snapshot "$state"
grep -q "resumed from .* at iteration 4" "$work/mlpres.txt" || { cat "$work/mlpres.txt"; fail "no resume line"; }
compare_weights "$dir/mlphalf/digits_iter_8.safetensors" "$dir/mlpres/digits_iter_8.safetensors" 0
diff <(losses "$dir/mlphalf/digits_log.jsonl" | tail -n 4) <(losses "$dir/mlpres/digits_log.jsonl") ||
  fail "the resumed GPU run's losses differ from the uninterrupted run's"
"$strata" launch --nproc 2 -- "$strata" train --solver "$dir/mlpcpu.prototxt" --device cpu --pp 2 --micro-batches 4 \
  --threads 1 --snapshot "$state" > "$work/mlpcpu.txt" 2>&1 ||
  { cat "$work/mlpcpu.txt"; fail "pp 2 on the CPU did not resume the GPU snapshot"; }
compare_weights "$dir/mlphalf/digits_iter_8.safetensors" "$dir/mlpcpu/digits_iter_8.safetensors" 1e-3
"$strata" train --solver "$dir/mlpone.prototxt" --device cpu --threads 1 --snapshot "$state" > "$work/mlpone.txt" 2>&1 ||
  { cat "$work/mlpone.txt"; fail "one CPU process did not resume the GPU snapshot"; }
compare_weights "$dir/mlphalf/digits_iter_8.safetensors" "$dir/mlpone/digits_iter_8.safetensors" 1e-3

echo "== --device cuda --pp 2 over tcp is refused, naming nccl"
if "$strata" launch --nproc 2 -- "$rank_wrapper" "$strata" train --solver "$dir/pp2.prototxt" --device cuda --pp 2 \
    --dp-backend tcp > "$work/refused.txt" 2>&1; then
  fail "a GPU pipeline over tcp was accepted"
fi
grep -q 'use --dp-backend nccl' "$work/refused.txt" || { cat "$work/refused.txt"; fail "no clear message"; }
echo "PASS"
