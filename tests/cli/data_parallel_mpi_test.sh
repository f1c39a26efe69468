#!/usr/bin/env bash
# Data-parallel training with the mpi backend under mpirun: 2 ranks with
# batch 64 each == 1 process with batch 128 (the digits net without dropout,
# no shuffling): same loss at every logged iteration and the same final
# weights, within float tolerance; overlapped and not; sharded (--shard
# OPTIMIZER, GRADIENTS) to the plain run's weights. The ranks find their
# place from OMPI_COMM_WORLD_*; no STRATA_MASTER or STRATA_TOKEN is set.
# Usage: data_parallel_mpi_test.sh STRATA_BINARY SOURCE_DIR MPIEXEC
set -euo pipefail
strata="$1"
src="$2"
mpiexec="$3"
fail() { echo "FAIL: $*"; exit 1; }
[ -x "$mpiexec" ] || fail "mpiexec '$mpiexec' is not executable: install openmpi-bin and re-run cmake"
export STRATA_TIMEOUT_S=10
# This test needs no store: make sure no outer launcher's settings leak in.
unset STRATA_MASTER STRATA_TOKEN STRATA_RANK STRATA_WORLD_SIZE STRATA_LOCAL_RANK STRATA_LOCAL_WORLD_SIZE

# shellcheck source=tests/cli/data_parallel_lib.sh
source "$(dirname "$0")/data_parallel_lib.sh"  # $work, removed at exit
setup_digits

make_net "$dir/net128.prototxt" 128
make_net "$dir/net64.prototxt" 64
# 8 iterations stay inside the first epoch of every rank's shard (1437 samples).
make_solver() {  # make_solver OUT NET PREFIX
  sed -e "s|^net:.*|net: \"$2\"|" \
      -e 's|^max_iter:.*|max_iter: 8|' \
      -e 's|^snapshot:.*|snapshot: 0|' \
      -e "s|^snapshot_prefix:.*|snapshot_prefix: \"$3\"|" \
      -e 's|^warmup_iter:.*|warmup_iter: 3|' \
      -e 's|^test_interval:.*|test_interval: 4|' \
      -e 's|^display:.*|display: 1|' \
      "$dir/solver.prototxt" > "$1"
}
make_solver "$dir/single.prototxt" net128.prototxt single/digits
make_solver "$dir/dp.prototxt" net64.prototxt dp/digits


echo "== 1 process, batch 128"
"$strata" train --solver "$dir/single.prototxt" --threads 1 > "$work/single.txt"
want="$dir/single/digits_iter_8.safetensors"
[ -f "$want" ] || fail "no final weights: $(cat "$work/single.txt")"

# OpenMPI as root in a container on few cores (see tests/parallel_mpi_test.cpp):
# --allow-run-as-root, --oversubscribe, --bind-to none (ctest -j2 runs other
# tests beside this one), ob1 over self and vader without the single-copy
# mechanism (CMA needs ptrace rights), no UCX, PMIx's hash store, and ranks
# that yield the core while they wait (2 ranks may share 1 core). `timeout`
# bounds a hung run.
run_mpi() {  # run_mpi OUT ARGS...
  local out="$1"
  shift
  PMIX_MCA_gds="hash" timeout -k 10 120 "$mpiexec" --allow-run-as-root --oversubscribe --bind-to none \
    --mca pml ob1 --mca btl self,vader --mca btl_vader_single_copy_mechanism none --mca osc ^ucx \
    --mca mpi_yield_when_idle 1 -np 2 "$@" > "$out" 2>&1 || { cat "$out"; fail "mpirun failed"; }
}

for overlap in "" "--no-overlap --bucket-mb 0.05"; do
  echo "== mpirun -np 2, batch 64 each, mpi backend ${overlap:-(overlapped, one bucket)}"
  rm -rf "$dir/dp"
  # shellcheck disable=SC2086
  run_mpi "$work/dp.txt" "$strata" train --solver "$dir/dp.prototxt" --threads 1 --dp-backend mpi $overlap
  grep -q 'data parallel: 2 ranks, mpi backend' "$work/dp.txt" || { cat "$work/dp.txt"; fail "no data-parallel summary"; }
  compare_weights "$want" "$dir/dp/digits_iter_8.safetensors" 1e-4
  compare_losses "$dir/single/digits_log.jsonl" "$dir/dp/digits_log.jsonl" 1e-4
  if [ -z "$overlap" ]; then cp "$dir/dp/digits_iter_8.safetensors" "$work/plain_mpi.safetensors"; fi
done

# Sharded (ZeRO 1 and 2) over mpi: reduce-scatter (blocking: the mpi backend
# has no asynchronous one), allgather and gather of the snapshot; two ranks
# add alike in any order, so the weights are the plain run's bit for bit.
for shard in OPTIMIZER GRADIENTS; do
  echo "== mpirun -np 2, mpi backend, shard $shard"
  rm -rf "$dir/dp"
  run_mpi "$work/zero.txt" "$strata" train --solver "$dir/dp.prototxt" --threads 1 --dp-backend mpi --shard "$shard" \
    --bucket-mb 0.05
  grep -q "shard $shard: rank r owns slice r" "$work/zero.txt" || { cat "$work/zero.txt"; fail "no slicing line"; }
  compare_weights "$work/plain_mpi.safetensors" "$dir/dp/digits_iter_8.safetensors" 0
done
echo "PASS"
