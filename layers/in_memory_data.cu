// The data layers on a GPU: the batch is produced on the host as on the CPU,
// straight into one of two pinned staging buffers, and copied to the device
// tops on the copy stream; the compute stream waits for the copy with an
// event (framework/cuda/batch_upload.h).
#include "framework/cuda/batch_upload.h"
#include "layers/in_memory_data.h"

namespace strata {

struct InMemoryDataLayer::CudaState {
  cuda::PinnedBatchUploader uploader;
};

void InMemoryDataLayer::forward_cuda(const BlobVec& /*bottom*/, const BlobVec& top) {
  if (!cuda_) cuda_ = std::make_shared<CudaState>();
  const int64_t data_floats = top[0]->numel();
  const int64_t label_floats = top.size() > 1 ? top[1]->numel() : 0;
  float* host = cuda_->uploader.stage(static_cast<size_t>(data_floats), static_cast<size_t>(label_floats));
  source_->next_batch(host, label_floats > 0 ? host + data_floats : nullptr);
  cuda_->uploader.upload(data_floats > 0 ? top[0]->data.device_data<float>() : nullptr,
                         label_floats > 0 ? top[1]->data.device_data<float>() : nullptr);
}

void InMemoryDataLayer::backward_cuda(const BlobVec& /*top*/, const std::vector<bool>& /*propagate_down*/,
                                      const BlobVec& /*bottom*/) {}

}  // namespace strata
