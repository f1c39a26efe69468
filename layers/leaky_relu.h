// LeakyReLU (PyTorch semantics): y = x for x > 0, negative_slope * x otherwise,
// with negative_slope defaulting to 0.01. Same computation as ReLU.
#pragma once

#include "layers/relu.h"

namespace strata {

class LeakyReLULayer : public ReLULayer {
 public:
  LeakyReLULayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();
};

}  // namespace strata
