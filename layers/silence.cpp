#include "layers/silence.h"

#include "framework/layer_registry.h"

namespace strata {

LayerSchema SilenceLayer::schema() {
  LayerSchema s;
  s.summary = "Consumes blobs nothing else uses (no tops); their gradient is zero";
  s.examples = {layer_example("", {{2, 3}}), layer_example("", {{2, 2, 3}, {2, 4}})};
  return s;
}

void SilenceLayer::forward_cpu(const BlobVec& /*bottom*/, const BlobVec& /*top*/) {}

void SilenceLayer::backward_cpu(const BlobVec& /*top*/, const std::vector<bool>& propagate_down,
                                const BlobVec& bottom) {
  for (size_t i = 0; i < bottom.size(); ++i) {
    if (propagate_down[i]) bottom[i]->diff.zero();
  }
}

STRATA_REGISTER_LAYER("Silence", SilenceLayer);

}  // namespace strata
