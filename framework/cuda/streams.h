// Pinned host buffers and cross-stream ordering: what a data layer needs to
// copy the next batch to the device on copy_stream() while compute_stream()
// is still busy with the current one. Only compiled with CUDA.
//
//   PinnedBuffer staging;                 // member of the data layer
//   staging.resize(bytes);                // no-op once big enough
//   fill staging.data() on the host ...
//   copy_to_device_async(dst, staging.data(), bytes);  // on copy_stream()
//   // compute_stream() now waits for the copy; the host must not touch
//   // staging until staging.wait_copies_done() (or use two buffers).
#pragma once

#ifdef STRATA_WITH_CUDA

#include <cuda_runtime.h>

#include <cstddef>

namespace strata::cuda {

// Page-locked host memory (cudaHostAlloc), grown on demand, never shrunk.
// Also tracks the last asynchronous copy out of it.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  // Waits for pending copies out of the buffer before reallocating.
  void resize(size_t bytes);
  void* data() { return ptr_; }
  size_t size() const { return bytes_; }
  // Marks the end of a copy queued on `stream` that reads this buffer.
  void record_copy(cudaStream_t stream);
  // Blocks the host until the recorded copies have read the buffer.
  void wait_copies_done();

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  cudaEvent_t done_ = nullptr;
  bool pending_ = false;
};

// `waiter` runs its later work only after everything queued so far on
// `producer` (an event recorded on producer, waited on by waiter).
void stream_wait(cudaStream_t waiter, cudaStream_t producer);

// Host (pinned) -> device on the current device's copy_stream(); the
// compute stream waits for it, the host does not. `src` must stay valid and
// unchanged until the copy is done: pass the PinnedBuffer to track that.
void copy_to_device_async(void* dst, const void* src, size_t bytes, PinnedBuffer* src_buffer);

// Timing with events on the compute stream (strata time): record before and
// after, read the milliseconds after a synchronisation.
class EventTimer {
 public:
  EventTimer();
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void start();
  void stop();
  float elapsed_ms();  // waits for the stop event
 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

}  // namespace strata::cuda

#endif  // STRATA_WITH_CUDA
