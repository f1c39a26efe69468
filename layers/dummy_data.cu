#include "layers/dummy_data.h"

namespace strata {

// The tops live on the device; refill() fills them there (constants) or
// through a host buffer (random fillers, drawn from the layer's RNG).
void DummyDataLayer::forward_cuda(const BlobVec& /*bottom*/, const BlobVec& top) { refill(top); }

void DummyDataLayer::backward_cuda(const BlobVec& /*top*/, const std::vector<bool>& /*propagate_down*/,
                                   const BlobVec& /*bottom*/) {}

}  // namespace strata
