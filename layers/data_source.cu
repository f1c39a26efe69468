// The data layers on a GPU: the batch is produced on the host as on the CPU,
// into one of two pinned staging buffers, and copied to the device tops on
// the copy stream; the compute stream waits for the copy with an event.
// Two buffers let the host fill the next batch while the previous copy may
// still be in flight.
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "layers/data_source.h"

namespace strata {

struct InMemoryDataLayer::CudaState {
  struct Staging {
    float* host = nullptr;  // pinned: data floats, then label floats
    size_t floats = 0;
    cudaEvent_t copied = nullptr;  // the copy out of `host` finished
    bool in_flight = false;
  };
  Staging staging[2];
  int next = 0;
  cudaEvent_t compute_done = nullptr;  // the compute stream is done with the previous batch

  CudaState() {
    STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&compute_done, cudaEventDisableTiming));
    for (Staging& s : staging) STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming));
  }
  ~CudaState() {
    // Destructors must not throw: errors here are ignored.
    for (Staging& s : staging) {
      if (s.copied) {
        cudaEventSynchronize(s.copied);
        cudaEventDestroy(s.copied);
      }
      if (s.host) cudaFreeHost(s.host);
    }
    if (compute_done) cudaEventDestroy(compute_done);
  }
  CudaState(const CudaState&) = delete;
  CudaState& operator=(const CudaState&) = delete;
};

void InMemoryDataLayer::forward_cuda(const BlobVec& /*bottom*/, const BlobVec& top) {
  if (!cuda_) cuda_ = std::make_shared<CudaState>();
  CudaState& st = *cuda_;
  CudaState::Staging& s = st.staging[st.next];
  st.next ^= 1;

  const int64_t data_floats = top[0]->numel();
  const int64_t label_floats = top.size() > 1 ? top[1]->numel() : 0;
  const size_t need = static_cast<size_t>(data_floats + label_floats);
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
  source_->next_batch(s.host, label_floats > 0 ? s.host + data_floats : nullptr);
  if (need == 0) return;

  // The tops may still be read by the previous iteration's kernels.
  cudaStream_t copy = cuda::copy_stream();
  STRATA_CUDA_CHECK(cudaEventRecord(st.compute_done, cuda::compute_stream()));
  STRATA_CUDA_CHECK(cudaStreamWaitEvent(copy, st.compute_done, 0));
  if (data_floats > 0) {
    STRATA_CUDA_CHECK(cudaMemcpyAsync(top[0]->data.data<float>(), s.host, sizeof(float) * data_floats,
                                      cudaMemcpyHostToDevice, copy));
  }
  if (label_floats > 0) {
    STRATA_CUDA_CHECK(cudaMemcpyAsync(top[1]->data.data<float>(), s.host + data_floats,
                                      sizeof(float) * label_floats, cudaMemcpyHostToDevice, copy));
  }
  STRATA_CUDA_CHECK(cudaEventRecord(s.copied, copy));
  s.in_flight = true;
  STRATA_CUDA_CHECK(cudaStreamWaitEvent(cuda::compute_stream(), s.copied, 0));
}

void InMemoryDataLayer::backward_cuda(const BlobVec& /*top*/, const std::vector<bool>& /*propagate_down*/,
                                      const BlobVec& /*bottom*/) {}

}  // namespace strata
