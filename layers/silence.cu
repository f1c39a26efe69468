#include "framework/cuda/math.h"
#include "layers/silence.h"

namespace strata {

void SilenceLayer::forward_cuda(const BlobVec& /*bottom*/, const BlobVec& /*top*/) {}

void SilenceLayer::backward_cuda(const BlobVec& /*top*/, const std::vector<bool>& propagate_down,
                                 const BlobVec& bottom) {
  for (size_t i = 0; i < bottom.size(); ++i) {
    if (propagate_down[i]) cuda::fill(bottom[i]->numel(), 0.0f, bottom[i]->diff.device_data<float>());
  }
}

}  // namespace strata
