#include "layers/reshape.h"

namespace strata {

// A device-to-device copy, as on the CPU (top and bottom stay independent blobs).
void ReshapeLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  top[0]->data.copy_from(bottom[0]->data);  // any dtype (takes_storage); queued on the compute stream
}

void ReshapeLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  bottom[0]->diff.copy_from(top[0]->diff);
}

}  // namespace strata
