// BatchPipeline: batches in flight between the host and a forward-only net
// (`strata embed`). While the device runs batch k, the host reads and stages
// batch k + 1 and pools and writes the rows of batch k - 1; nothing waits
// for the device but the oldest batch's output, when the host needs it.
//
// Two slots in turn, each with an input and an output buffer on the host
// (page-locked on a GPU, so the copies are queued on the compute stream
// without a wait) and a mark in the stream after its output copy. On the CPU
// the same order runs with plain buffers and copies done at once: the
// ordering is tested in CI with the outputs the GPU path must give.
//
//   BatchPipeline pipe(device);
//   float* in = pipe.input(floats);       // a free slot's input buffer
//   ... fill in ...
//   pipe.send_input(input_blob.data);     // queued into the net's input
//   net.forward(...);
//   pipe.receive_output(out_blob.data);   // queued out; the batch is in flight
//   if (pipe.in_flight() > 1) use(pipe.finish_oldest());  // waits for that one only
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "framework/tensor.h"

namespace strata {

class BatchPipeline {
 public:
  static constexpr int kSlots = 2;

  explicit BatchPipeline(Device device);
  ~BatchPipeline();
  BatchPipeline(const BatchPipeline&) = delete;
  BatchPipeline& operator=(const BatchPipeline&) = delete;

  // The next slot's input buffer, at least `floats` long. Its last batch
  // must have been finished (finish_oldest) first.
  float* input(int64_t floats);
  // Copies the staged input (`dst.numel()` floats) into `dst`, an f32 tensor
  // on the pipeline's device: queued behind the work already on the device.
  void send_input(Tensor& dst);
  // Copies `src` (f32, on the device) out to the slot's output buffer,
  // queued behind the forward that wrote it; the batch is then in flight.
  void receive_output(const Tensor& src);
  int in_flight() const { return in_flight_; }

  struct Finished {
    const float* data = nullptr;  // valid until this slot's input() is asked for again
    int64_t floats = 0;
  };
  // Waits for the oldest batch in flight and returns its output.
  Finished finish_oldest();

 private:
  struct Slot;
  Slot& slot(int k);

  Device device_;
  std::vector<std::unique_ptr<Slot>> slots_;
  int next_ = 0;       // the slot the next input() fills
  int oldest_ = 0;     // the oldest slot in flight
  int in_flight_ = 0;
  bool staged_ = false;  // input() given and not yet sent or closed
};

}  // namespace strata
