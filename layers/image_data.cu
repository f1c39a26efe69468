// ImageData on a GPU: the loader decodes and transforms on the host as on
// the CPU; each batch is then copied into one of two pinned staging buffers
// and from there to the device tops on the copy stream, which the compute
// stream waits for with an event (framework/cuda/batch_upload.h, shared
// with framework/data/data_source.cu).
#include <cstring>

#include "framework/cuda/batch_upload.h"
#include "framework/error.h"
#include "layers/image_data.h"

namespace strata {

struct ImageDataLayer::CudaState {
  cuda::PinnedBatchUploader uploader;
};

void ImageDataLayer::forward_cuda(const BlobVec& /*bottom*/, const BlobVec& top) {
  if (!loader_) fail<Error>(where(), ": forward before setup()");
  loader_->next(batch_);  // kRepeat: always a full batch
  const size_t data_floats = static_cast<size_t>(top[0]->numel());
  const size_t label_floats = top.size() > 1 ? static_cast<size_t>(top[1]->numel()) : 0;
  STRATA_CHECK(batch_.data.size() == data_floats && (label_floats == 0 || batch_.labels.size() == label_floats),
               where(), ": the loader's batch (", batch_.data.size(), " values, ", batch_.labels.size(),
               " labels) does not fit the tops ", shape_str(top[0]->shape()));

  if (!cuda_) cuda_ = std::make_shared<CudaState>();
  float* host = cuda_->uploader.stage(data_floats, label_floats);
  if (data_floats > 0) std::memcpy(host, batch_.data.data(), data_floats * sizeof(float));
  if (label_floats > 0) std::memcpy(host + data_floats, batch_.labels.data(), label_floats * sizeof(float));
  cuda_->uploader.upload(data_floats > 0 ? top[0]->data.device_data<float>() : nullptr,
                         label_floats > 0 ? top[1]->data.device_data<float>() : nullptr);
}

void ImageDataLayer::backward_cuda(const BlobVec& /*top*/, const std::vector<bool>& /*propagate_down*/,
                                   const BlobVec& /*bottom*/) {}

}  // namespace strata
