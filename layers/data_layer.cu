// The data layers on a GPU: the batch is produced on the host as on the CPU,
// into pinned staging buffers (one double buffer per top), and copied to the
// device tops on the copy stream; the compute stream waits for the copy with
// an event (framework/cuda/batch_upload.h).
#include <memory>
#include <vector>

#include "framework/cuda/batch_upload.h"
#include "layers/data_layer.h"

namespace strata {

struct DataLayer::CudaState {
  std::vector<std::unique_ptr<cuda::PinnedBatchUploader>> uploaders;  // one per top
};

void DataLayer::forward_cuda(const BlobVec& /*bottom*/, const BlobVec& top) {
  if (!cuda_) cuda_ = std::make_shared<CudaState>();
  auto& ups = cuda_->uploaders;
  while (ups.size() < top.size()) ups.push_back(std::make_unique<cuda::PinnedBatchUploader>());
  std::vector<float*> host(top.size());
  for (size_t i = 0; i < top.size(); ++i) host[i] = ups[i]->stage(static_cast<size_t>(top[i]->numel()), 0);
  next_batch(top, host);
  for (size_t i = 0; i < top.size(); ++i) {
    ups[i]->upload(top[i]->numel() > 0 ? top[i]->data.device_data<float>() : nullptr, nullptr);
  }
}

void DataLayer::backward_cuda(const BlobVec& /*top*/, const std::vector<bool>& /*propagate_down*/,
                              const BlobVec& /*bottom*/) {}

}  // namespace strata
