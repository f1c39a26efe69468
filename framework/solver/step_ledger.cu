// The device half of StepLedger: the ring of records and the carry in device
// memory, their pinned host copies and one event per slot. The decision is
// decide_step (step_verdict.h) run by one thread, so the host's CPU path and
// the device evaluate the same expressions.
#include "framework/solver/step_ledger.h"

#include <memory>
#include <vector>

#include "framework/cuda/device_api.h"
#include "framework/cuda/runtime.h"

namespace strata::step_ledger_cuda {

struct Ring {
  int device = 0;
  int slots = 0;
  void* block = nullptr;  // carry | records
  StepCarry* carry = nullptr;
  StepVerdict* records = nullptr;
  StepVerdict* pinned = nullptr;
  std::vector<cudaEvent_t> copied;
};

namespace {

__global__ void decide_kernel(StepRule rule, StepCarry* carry, StepVerdict* record) {
  decide_step(rule, *carry, *record);
}

__global__ void begin_kernel(StepVerdict* record, double lr) {
  StepVerdict v;
  v.lr = lr;
  *record = v;
}

constexpr size_t kCarryBytes = 256;  // the records start aligned

}  // namespace

Ring* create(int index, const StepCarry& carry, int slots) {
  cuda::DeviceGuard guard(index);
  auto ring = std::make_unique<Ring>();
  ring->device = index;
  ring->slots = slots;
  static_assert(sizeof(StepCarry) <= kCarryBytes, "the carry outgrew its place");
  ring->block = cuda::device_malloc(kCarryBytes + sizeof(StepVerdict) * static_cast<size_t>(slots + 1), index);
  ring->carry = static_cast<StepCarry*>(ring->block);
  ring->records = reinterpret_cast<StepVerdict*>(static_cast<char*>(ring->block) + kCarryBytes);
  void* pinned = nullptr;
  STRATA_CUDA_CHECK(cudaHostAlloc(&pinned, sizeof(StepVerdict) * static_cast<size_t>(slots), cudaHostAllocDefault));
  ring->pinned = static_cast<StepVerdict*>(pinned);
  for (int s = 0; s < slots; ++s) {
    cudaEvent_t e = nullptr;
    STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    ring->copied.push_back(e);
  }
  // The carry comes from the host once; wait, as `carry` is the caller's.
  cudaStream_t stream = cuda::compute_stream();
  STRATA_CUDA_CHECK(cudaMemcpyAsync(ring->carry, &carry, sizeof carry, cudaMemcpyHostToDevice, stream));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
  return ring.release();
}

void destroy(Ring* ring) noexcept {
  if (!ring) return;
  {
    cuda::DeviceGuard guard(ring->device);
    for (cudaEvent_t e : ring->copied) {
      cudaEventSynchronize(e);  // a copy still in flight writes into `pinned`
      cudaEventDestroy(e);
    }
    if (ring->pinned) cudaFreeHost(ring->pinned);
    cuda::device_free(ring->block, ring->device);
  }
  delete ring;
}

void begin(Ring* ring, int record, double lr, StepSlots& slots) {
  cuda::DeviceGuard guard(ring->device);
  StepVerdict* r = ring->records + record;
  begin_kernel<<<1, 1, 0, cuda::compute_stream()>>>(r, lr);
  STRATA_KERNEL_CHECK();
  slots.lr = &r->lr;
  slots.loss_sum = &r->loss_sum;
  slots.sum_squares = &r->sum_squares;
  slots.nonfinite = &r->nonfinite;
  slots.stop = &r->stop;
  slots.scale = &ring->carry->scale;
  slots.applied = &r->applied;
  slots.updates = &r->updates;
}

void decide(Ring* ring, int record, const StepRule& rule) {
  cuda::DeviceGuard guard(ring->device);
  decide_kernel<<<1, 1, 0, cuda::compute_stream()>>>(rule, ring->carry, ring->records + record);
  STRATA_KERNEL_CHECK();
}

void finish(Ring* ring, int record, int slot) {
  cuda::DeviceGuard guard(ring->device);
  cudaStream_t stream = cuda::compute_stream();
  STRATA_CUDA_CHECK(cudaMemcpyAsync(ring->pinned + slot, ring->records + record, sizeof(StepVerdict),
                                    cudaMemcpyDeviceToHost, stream));
  STRATA_CUDA_CHECK(cudaEventRecord(ring->copied[static_cast<size_t>(slot)], stream));
}

StepVerdict read(Ring* ring, int slot) {
  cuda::DeviceGuard guard(ring->device);
  STRATA_CUDA_CHECK(cudaEventSynchronize(ring->copied[static_cast<size_t>(slot)]));
  return ring->pinned[slot];
}

}  // namespace strata::step_ledger_cuda
