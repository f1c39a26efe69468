// Silence (Caffe "Silence"): takes blobs that nothing else uses, so that a
// net does not print or keep them as outputs. No tops; forward does nothing,
// backward gives every bottom a zero gradient.
#pragma once

#include <vector>

#include "framework/layer.h"

namespace strata {

class SilenceLayer : public Layer {
 public:
  SilenceLayer(const LayerSpec& spec, const LayerContext& ctx) : Layer(spec, ctx) {}
  static LayerSchema schema();

  int max_bottoms() const override { return -1; }
  int min_tops() const override { return 0; }
  int max_tops() const override { return 0; }

  void reshape(const BlobVec& /*bottom*/, const BlobVec& /*top*/) override {}
  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override;
  void backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                    const BlobVec& bottom) override;
  STRATA_CUDA_METHODS;  // in silence.cu
  bool replays_in_a_graph() const override { return true; }
};

}  // namespace strata
