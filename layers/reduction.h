// Reduction (Caffe "Reduction"): reduces every axis from reduction_param.axis
// on to one number, times coeff: with the bottom viewed as [rows, dim] (rows
// = the dims before the axis, which are the top's shape; a scalar for
// axis 0), each row gives
//   SUM: coeff * sum x    ASUM: coeff * sum |x|    SUMSQ: coeff * sum x^2
//   MEAN: coeff * sum x / dim (0 for an empty row)
// Backward: dx = coeff * dy_row * (1, sign(x), 2x, or 1 / dim).
// Caffe uses it to turn a per-element loss into a scalar.
//
// The per-element gradient is shared by reduction.cpp and reduction.cu.
#pragma once

#include <cstdint>
#include <vector>

#include "framework/layer.h"
#include "layers/host_device.h"

namespace strata {

enum class ReductionOp : int { kSum = 0, kAsum = 1, kSumSq = 2, kMean = 3 };

// What element x adds to its row's sum (before coeff, and before / dim for MEAN).
STRATA_HOST_DEVICE double reduction_term(ReductionOp op, float x) {
  return op == ReductionOp::kAsum ? (x < 0.0f ? -static_cast<double>(x) : static_cast<double>(x))
         : op == ReductionOp::kSumSq ? static_cast<double>(x) * x
                                     : static_cast<double>(x);
}

// d(top row)/dx times dy, where `scale` is coeff (coeff / dim for MEAN).
STRATA_HOST_DEVICE float reduction_grad(ReductionOp op, float x, float dy, float scale) {
  const float g = dy * scale;
  if (op == ReductionOp::kAsum) return x > 0.0f ? g : x < 0.0f ? -g : 0.0f;
  if (op == ReductionOp::kSumSq) return 2.0f * x * g;
  return g;
}

class ReductionLayer : public Layer {
 public:
  ReductionLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;  // in reduction.cu
  bool replays_in_a_graph() const override { return true; }

 private:
  // coeff, divided by dim for MEAN (0 for an empty row, whose mean is 0).
  float scale() const;

  ReductionOp op_;
  int64_t axis_param_;
  float coeff_;
  int64_t rows_ = 0, dim_ = 0;  // set by reshape()
};

}  // namespace strata
