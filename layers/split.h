// Split: hands one bottom to several consumers. Forward copies the bottom to
// every top; backward sums the tops' gradients. The Net inserts it wherever a
// blob feeds more than one layer; it may also be written explicitly.
#pragma once

#include <vector>

#include "framework/layer.h"

namespace strata {

class SplitLayer : public Layer {
 public:
  SplitLayer(const LayerSpec& spec, const LayerContext& ctx) : Layer(spec, ctx) {}
  static LayerSchema schema();
  // Backward sums the tops' gradients only.
  BackwardReads backward_reads() const override { return {false, false}; }

  int max_tops() const override { return -1; }

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;  // in split.cu
};

}  // namespace strata
