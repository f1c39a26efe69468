#include "layers/reduction.h"

#include <string>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/cpu/threads.h"

namespace strata {

ReductionLayer::ReductionLayer(const LayerSpec& spec, const LayerContext& ctx) : Layer(spec, ctx) {
  const ConfigNode& p = block("reduction_param");
  const std::string op = p.get_enum("operation", {"SUM", "ASUM", "SUMSQ", "MEAN"}, "SUM");
  op_ = op == "SUM" ? ReductionOp::kSum : op == "ASUM" ? ReductionOp::kAsum : op == "SUMSQ" ? ReductionOp::kSumSq
                                                                                           : ReductionOp::kMean;
  axis_param_ = p.get_int("axis", 0);
  coeff_ = static_cast<float>(p.get_double("coeff", 1.0));
}

LayerSchema ReductionLayer::schema() {
  LayerSchema s;
  s.summary = "Sums (SUM, ASUM, SUMSQ or MEAN, times coeff) every axis from one on (Caffe Reduction)";
  s.blocks = {{"reduction_param", {"operation", "axis", "coeff"}}};
  // ASUM has a kink at 0; the generic inputs keep two steps away from it.
  s.examples = {
      layer_example("reduction_param { axis: 1 }", {{2, 3, 4}}),
      layer_example("reduction_param { operation: ASUM axis: 2 coeff: -0.5 }", {{2, 3, 4}}),
      layer_example("reduction_param { operation: SUMSQ axis: -1 coeff: 2 }", {{3, 2, 3}}),
      layer_example("reduction_param { operation: MEAN }", {{2, 3}}),
  };
  return s;
}


void ReductionLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Shape& s = bottom[0]->shape();
  const int64_t n = static_cast<int64_t>(s.size());
  const int64_t axis = axis_param_ < 0 ? axis_param_ + n : axis_param_;
  if (axis < 0 || axis > n || (n > 0 && axis == n)) {
    shape_error("reduction_param axis " + std::to_string(axis_param_) + " is out of range for bottom " +
                shape_str(s) + "; set it to one of its " + std::to_string(n) + " axes (all axes from it on are reduced)");
  }
  rows_ = bottom[0]->data.count(0, static_cast<int>(axis));
  dim_ = bottom[0]->data.count(static_cast<int>(axis));
  top[0]->resize(Shape(s.begin(), s.begin() + axis));
}

float ReductionLayer::scale() const {
  if (op_ != ReductionOp::kMean) return coeff_;
  return dim_ > 0 ? coeff_ / static_cast<float>(dim_) : 0.0f;
}

void ReductionLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const float* x = bottom[0]->data.data<float>();
  float* y = top[0]->data.data<float>();
  const int64_t dim = dim_;
  const ReductionOp op = op_;
  const double sc = scale();
  parallel_for(rows_, 1, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      double s = 0.0;
      for (int64_t j = 0; j < dim; ++j) s += reduction_term(op, x[r * dim + j]);
      y[r] = static_cast<float>(s * sc);
    }
  });
}

void ReductionLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                  const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const float* x = bottom[0]->data.data<float>();
  const float* dy = top[0]->diff.data<float>();
  float* dx = bottom[0]->diff.data<float>();
  const int64_t dim = dim_;
  const ReductionOp op = op_;
  const float sc = scale();
  parallel_for(bottom[0]->numel(), 16384, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) dx[j] = reduction_grad(op, x[j], dy[j / dim], sc);
  });
}

STRATA_REGISTER_LAYER("Reduction", ReductionLayer);

}  // namespace strata
