// The data layers' double-buffered upload of a batch; see batch_upload.h.
#include "framework/cuda/batch_upload.h"

#include "framework/cuda/runtime.h"
#include "framework/error.h"

namespace strata::cuda {

PinnedBatchUploader::PinnedBatchUploader() {
  STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&compute_done_, cudaEventDisableTiming));
  for (Staging& s : staging_) STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming));
}

PinnedBatchUploader::~PinnedBatchUploader() {
  // Destructors must not throw: errors here are ignored.
  for (Staging& s : staging_) {
    if (s.copied) {
      cudaEventSynchronize(s.copied);
      cudaEventDestroy(s.copied);
    }
    if (s.host) cudaFreeHost(s.host);
  }
  if (compute_done_) cudaEventDestroy(compute_done_);
}

float* PinnedBatchUploader::stage(size_t data_floats, size_t label_floats) {
  Staging& s = staging_[next_];
  next_ ^= 1;
  current_ = nullptr;
  const size_t need = data_floats + label_floats;
  // The buffer may still be the source of the copy two batches ago.
  if (s.in_flight) {
    STRATA_CUDA_CHECK(cudaEventSynchronize(s.copied));
    s.in_flight = false;
  }
  if (s.floats < need) {
    if (s.host) STRATA_CUDA_CHECK(cudaFreeHost(s.host));
    s.host = nullptr;
    s.floats = 0;
    STRATA_CUDA_CHECK(cudaMallocHost(&s.host, need * sizeof(float)));
    s.floats = need;
  }
  current_ = &s;
  data_floats_ = data_floats;
  label_floats_ = label_floats;
  return s.host;
}

void PinnedBatchUploader::upload(float* dev_data, float* dev_labels) {
  STRATA_CHECK(current_ != nullptr, "PinnedBatchUploader::upload without a stage() before it");
  Staging& s = *current_;
  current_ = nullptr;
  if (data_floats_ + label_floats_ == 0) return;

  // The tops may still be read by the previous iteration's kernels.
  cudaStream_t copy = copy_stream();
  STRATA_CUDA_CHECK(cudaEventRecord(compute_done_, compute_stream()));
  STRATA_CUDA_CHECK(cudaStreamWaitEvent(copy, compute_done_, 0));
  if (data_floats_ > 0) {
    STRATA_CUDA_CHECK(cudaMemcpyAsync(dev_data, s.host, sizeof(float) * data_floats_, cudaMemcpyHostToDevice, copy));
  }
  if (label_floats_ > 0) {
    STRATA_CUDA_CHECK(cudaMemcpyAsync(dev_labels, s.host + data_floats_, sizeof(float) * label_floats_,
                                      cudaMemcpyHostToDevice, copy));
  }
  STRATA_CUDA_CHECK(cudaEventRecord(s.copied, copy));
  s.in_flight = true;
  STRATA_CUDA_CHECK(cudaStreamWaitEvent(compute_stream(), s.copied, 0));
}

}  // namespace strata::cuda
