// Data on a GPU: the reader decodes and transforms on the host as on the CPU;
// each batch is then copied through pinned staging buffers to the device
// tops on the copy stream (framework/cuda/batch_upload.h), as ImageData does.
#include <cstring>

#include "framework/cuda/batch_upload.h"
#include "framework/error.h"
#include "layers/caffe_data.h"

namespace strata {

struct CaffeDataLayer::CudaState {
  cuda::PinnedBatchUploader uploader;
};

void CaffeDataLayer::forward_cuda(const BlobVec& /*bottom*/, const BlobVec& top) {
  read_batch();
  const size_t data_floats = static_cast<size_t>(top[0]->numel());
  const size_t label_floats = top.size() > 1 ? static_cast<size_t>(top[1]->numel()) : 0;
  STRATA_CHECK(data_.size() == data_floats && (label_floats == 0 || labels_.size() == label_floats), where(),
               ": the reader's batch (", data_.size(), " values, ", labels_.size(), " labels) does not fit the tops ",
               shape_str(top[0]->shape()));
  if (!cuda_) cuda_ = std::make_shared<CudaState>();
  float* host = cuda_->uploader.stage(data_floats, label_floats);
  if (data_floats > 0) std::memcpy(host, data_.data(), data_floats * sizeof(float));
  if (label_floats > 0) std::memcpy(host + data_floats, labels_.data(), label_floats * sizeof(float));
  cuda_->uploader.upload(data_floats > 0 ? top[0]->data.device_data<float>() : nullptr,
                         label_floats > 0 ? top[1]->data.device_data<float>() : nullptr);
}

void CaffeDataLayer::backward_cuda(const BlobVec& /*top*/, const std::vector<bool>& /*propagate_down*/,
                                   const BlobVec& /*bottom*/) {}

}  // namespace strata
