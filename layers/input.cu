#include "layers/input.h"

namespace strata {

// The blobs already live on the device; whoever feeds the Net writes them.
void InputLayer::forward_cuda(const BlobVec& /*bottom*/, const BlobVec& /*top*/) {}

void InputLayer::backward_cuda(const BlobVec& /*top*/, const std::vector<bool>& /*propagate_down*/,
                               const BlobVec& /*bottom*/) {}

}  // namespace strata
