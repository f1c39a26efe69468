// HDF5Data on a GPU: rows are read on the host as on the CPU, then each top
// goes through its own pinned double buffer to the device on the copy stream
// (framework/cuda/batch_upload.h), as the other data layers do.
#include <cstring>
#include <memory>
#include <vector>

#include "framework/cuda/batch_upload.h"
#include "framework/error.h"
#include "layers/hdf5_data.h"

namespace strata {

struct Hdf5DataLayer::CudaState {
  std::vector<std::unique_ptr<cuda::PinnedBatchUploader>> uploaders;  // one per top
};

void Hdf5DataLayer::forward_cuda(const BlobVec& /*bottom*/, const BlobVec& top) {
  read_batch();
  if (!cuda_) {
    cuda_ = std::make_shared<CudaState>();
    for (size_t i = 0; i < top.size(); ++i) cuda_->uploaders.push_back(std::make_unique<cuda::PinnedBatchUploader>());
  }
  auto& ups = cuda_->uploaders;
  for (size_t i = 0; i < top.size(); ++i) {
    const size_t n = static_cast<size_t>(top[i]->numel());
    STRATA_CHECK(staged_[i].size() == n, where(), ": the reader's batch for top ", i, " holds ", staged_[i].size(),
                 " values, the top ", shape_str(top[i]->shape()));
    float* host = ups[i]->stage(n, 0);
    if (n > 0) std::memcpy(host, staged_[i].data(), n * sizeof(float));
    ups[i]->upload(n > 0 ? top[i]->data.device_data<float>() : nullptr, nullptr);
  }
}

void Hdf5DataLayer::backward_cuda(const BlobVec& /*top*/, const std::vector<bool>& /*propagate_down*/,
                                  const BlobVec& /*bottom*/) {}

}  // namespace strata
