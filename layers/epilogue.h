// The CPU side of a fused epilogue (Layer::epilogue, framework/net_fusion.cpp):
// a GEMM's or convolution's outputs put through the activation layer's own
// formula (ReLUOp) as they are written, so that the fused layer gives the
// bits the two layers would.
#pragma once

#include <cstdint>

#include "framework/layer.h"
#include "layers/relu.h"

namespace strata {

// y[i] = e(y[i]) for i < n, on the calling thread (one of a layer's workers).
inline void apply_epilogue(const Epilogue& e, float* y, int64_t n) {
  if (e.kind != Epilogue::Kind::kReLU) return;
  const ReLUOp op{e.slope};
  for (int64_t i = 0; i < n; ++i) y[i] = op.forward(y[i]);
}

}  // namespace strata
