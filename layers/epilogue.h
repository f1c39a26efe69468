// A fused epilogue (Layer::epilogue, framework/net_fusion.cpp): a GEMM's or
// convolution's outputs put through the activation layer's own formula
// (ReLUOp) as they are written, so that the fused layer gives the bits the
// two layers would. On a GPU the same formula runs in the bias kernel
// (cuda::Activation).
#pragma once

#include <cstdint>

#include "framework/layer.h"
#include "layers/relu.h"
#ifdef STRATA_WITH_CUDA
#include "framework/cuda/math.h"  // cuda::Activation
#endif

namespace strata {

// y[i] = e(y[i]) for i < n, on the calling thread (one of a layer's workers).
inline void apply_epilogue(const Epilogue& e, float* y, int64_t n) {
  if (e.kind != Epilogue::Kind::kReLU) return;
  const ReLUOp op{e.slope};
  for (int64_t i = 0; i < n; ++i) y[i] = op.forward(y[i]);
}

#ifdef STRATA_WITH_CUDA
// The epilogue for a GPU bias kernel (cuda::add_row_bias, add_channel_bias_stored).
inline cuda::Activation device_activation(const Epilogue& e) {
  return {e.kind == Epilogue::Kind::kReLU, e.slope};
}
#endif

}  // namespace strata
