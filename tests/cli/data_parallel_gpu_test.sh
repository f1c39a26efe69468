#!/usr/bin/env bash
# Data-parallel training on GPUs through `strata launch ... -- strata train --device cuda`:
# 2 ranks with batch 64 each on the GPU train like 1 GPU process with batch 128
# (same logged losses and final weights within 1e-3 relative: cuDNN may pick
# other algorithms for the other batch size, and the sums are reassociated), with the nccl backend (gradients reduced on the
# GPU, when the build has NCCL) and with tcp (gradients staged through host
# memory), overlapped and not, and with BF16 compression over tcp (compared with a
# looser tolerance). Both ranks share GPU 0 when there is only one.
# Exits 77 (skipped) when the build has no CUDA backend or the machine no GPU.
# Usage: data_parallel_gpu_test.sh STRATA_BINARY SOURCE_DIR
set -euo pipefail
strata="$1"
src="$2"
fail() { echo "FAIL: $*"; exit 1; }
export STRATA_TIMEOUT_S=60

# shellcheck source=tests/cli/data_parallel_lib.sh
source "$(dirname "$0")/data_parallel_lib.sh"  # $work, removed at exit
setup_digits
make_net "$dir/net128.prototxt" 128
make_net "$dir/net64.prototxt" 64
make_solver() {  # make_solver OUT NET PREFIX
  sed -e "s|^net:.*|net: \"$2\"|" -e 's|^max_iter:.*|max_iter: 8|' -e 's|^snapshot:.*|snapshot: 0|' \
      -e "s|^snapshot_prefix:.*|snapshot_prefix: \"$3\"|" -e 's|^warmup_iter:.*|warmup_iter: 3|' \
      -e 's|^test_interval:.*|test_interval: 4|' -e 's|^display:.*|display: 1|' \
      "$dir/solver.prototxt" > "$1"
}
make_solver "$dir/single.prototxt" net128.prototxt single/digits
make_solver "$dir/dp.prototxt" net64.prototxt dp/digits

echo "== 1 GPU process, batch 128"
if ! "$strata" train --solver "$dir/single.prototxt" --device cuda > "$work/single.txt" 2>&1; then
  if grep -Eq 'no CUDA backend|no CUDA device|no GPU|CUDA driver' "$work/single.txt"; then
    echo "SKIP: $(grep -E 'no CUDA backend|no CUDA device|no GPU|CUDA driver' "$work/single.txt" | head -n 1)"
    exit 77
  fi
  cat "$work/single.txt"
  fail "single-GPU training failed"
fi
want="$dir/single/digits_iter_8.safetensors"
[ -f "$want" ] || fail "no final weights: $(cat "$work/single.txt")"

# NCCL refuses two ranks on one GPU ("duplicate GPU"), which is what a one-GPU machine
# gives: each rank then says it is its own host (NCCL_HOSTID) and NCCL talks over
# loopback sockets, as in tests/parallel_nccl_test.cpp.
rank_wrapper="$work/rank_wrapper.sh"
cat > "$rank_wrapper" <<'WRAP'
#!/usr/bin/env bash
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${gpus:-0}" -lt 2 ]; then
  export NCCL_HOSTID="strata-dp-gpu-test-rank${STRATA_RANK:-0}" NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 \
         NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo
fi
exec "$@"
WRAP
chmod +x "$rank_wrapper"

for backend in nccl tcp; do
  for overlap in "" "--no-overlap --bucket-mb 0.05"; do
    echo "== 2 GPU ranks, batch 64 each, $backend ${overlap:-(overlapped)}"
    rm -rf "$dir/dp"
    # shellcheck disable=SC2086
    if ! "$strata" launch --nproc 2 -- "$rank_wrapper" "$strata" train --solver "$dir/dp.prototxt" --device cuda \
        --dp-backend "$backend" $overlap > "$work/dp.txt" 2>&1; then
      if [ "$backend" = nccl ] && grep -q 'built without NCCL' "$work/dp.txt"; then
        echo "  (this build has no NCCL: skipped)"; continue
      fi
      cat "$work/dp.txt"; fail "launch failed ($backend)"
    fi
    grep -q "^\[rank 0\] data parallel: 2 ranks, $backend backend" "$work/dp.txt" ||
      { cat "$work/dp.txt"; fail "the run did not use the $backend backend"; }
    compare_weights "$want" "$dir/dp/digits_iter_8.safetensors" 1e-3
    compare_losses "$dir/single/digits_log.jsonl" "$dir/dp/digits_log.jsonl" 1e-3
    if [ -z "$overlap" ]; then cp "$dir/dp/digits_iter_8.safetensors" "$work/plain_$backend.safetensors"; fi
  done
  # Sharded data parallel (ZeRO 1 to 3): nccl reduce-scatters on the GPU from
  # the gradient slots, updates the GPU slices with the fused kernels and (3)
  # gathers each bucket into a device tensor the weights view; tcp stages the
  # buckets and updates the slices on the host, so its last bits may differ
  # from the GPU update.
  [ -f "$work/plain_$backend.safetensors" ] || continue
  for shard in OPTIMIZER GRADIENTS PARAMETERS; do
    echo "== 2 GPU ranks, $backend, shard $shard"
    rm -rf "$dir/dp"
    "$strata" launch --nproc 2 -- "$rank_wrapper" "$strata" train --solver "$dir/dp.prototxt" --device cuda \
      --dp-backend "$backend" --shard "$shard" --bucket-mb 0.05 > "$work/zero.txt" 2>&1 ||
      { cat "$work/zero.txt"; fail "sharded launch failed ($backend, $shard)"; }
    grep -q "^\[rank 0\] shard $shard: rank r owns slice r" "$work/zero.txt" ||
      { cat "$work/zero.txt"; fail "the run does not print its slicing"; }
    compare_weights "$work/plain_$backend.safetensors" "$dir/dp/digits_iter_8.safetensors" 1e-5
    compare_losses "$dir/single/digits_log.jsonl" "$dir/dp/digits_log.jsonl" 1e-3
  done
done

echo "== 2 GPU ranks, tcp, BF16 compression"
rm -rf "$dir/dp"
"$strata" launch --nproc 2 -- "$strata" train --solver "$dir/dp.prototxt" --device cuda --dp-backend tcp \
  --compression BF16 > "$work/bf16.txt" 2>&1 || { cat "$work/bf16.txt"; fail "BF16 run failed"; }
compare_losses "$dir/single/digits_log.jsonl" "$dir/dp/digits_log.jsonl" 2e-2

echo "PASS"
