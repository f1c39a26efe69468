// Double-buffered host-to-device upload of a data layer's batch: the batch
// is written on the host into one of two pinned staging buffers (data
// floats, then label floats) and copied to the device tops on
// copy_stream(); the copy first waits for everything queued so far on
// compute_stream() (the tops may still be read by the previous iteration's
// kernels), and compute_stream() then waits for the copy with an event.
// Two buffers let the host fill the next batch while the previous copy may
// still be in flight. Only compiled with CUDA (STRATA_WITH_CUDA).
//
//   PinnedBatchUploader up;                     // member of the layer
//   float* host = up.stage(data_floats, label_floats);
//   fill host[0, data_floats) and host[data_floats, data_floats + label_floats) ...
//   up.upload(dev_data, dev_labels);            // queued; the host does not wait
#pragma once

#ifdef STRATA_WITH_CUDA

#include <cuda_runtime.h>

#include <cstddef>

namespace strata::cuda {

class PinnedBatchUploader {
 public:
  PinnedBatchUploader();   // creates the events; throws strata::Error on failure
  ~PinnedBatchUploader();  // waits for copies in flight; never throws
  PinnedBatchUploader(const PinnedBatchUploader&) = delete;
  PinnedBatchUploader& operator=(const PinnedBatchUploader&) = delete;

  // Takes the next staging buffer, waiting first for the copy two batches
  // ago that may still read it, and grows it to at least
  // data_floats + label_floats floats. Returns its start: the data floats
  // go there, the label floats right after them. nullptr when nothing was
  // ever allocated (both sizes 0).
  float* stage(size_t data_floats, size_t label_floats);

  // Queues the copy of the buffer of the last stage() to the device: the
  // data floats to `dev_data`, the label floats to `dev_labels` (each used
  // only when its size is non-zero). Nothing is queued when both sizes are 0.
  void upload(float* dev_data, float* dev_labels);

 private:
  struct Staging {
    float* host = nullptr;  // pinned: data floats, then label floats
    size_t floats = 0;
    cudaEvent_t copied = nullptr;  // the copy out of `host` finished
    bool in_flight = false;
  };
  Staging staging_[2];
  int next_ = 0;
  cudaEvent_t compute_done_ = nullptr;  // the compute stream is done with the previous batch
  // The last stage(): its buffer and sizes, until upload().
  Staging* current_ = nullptr;
  size_t data_floats_ = 0;
  size_t label_floats_ = 0;
};

}  // namespace strata::cuda

#endif  // STRATA_WITH_CUDA
