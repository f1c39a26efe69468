#include "layers/softmax_with_loss.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "framework/error.h"
#include "framework/layer_registry.h"

namespace strata {

LayerSchema SoftmaxWithLossLayer::schema() {
  LayerSchema s;
  s.summary = "Softmax + multinomial logistic loss on integer labels (ignore_label, VALID/BATCH_SIZE/FULL/NONE normalization)";
  s.blocks = {{"softmax_param", {"axis", "engine"}},
              {"loss_param", {"ignore_label", "normalization", "normalize"}}};
  LayerExample flat;
  flat.bottom_shapes = {{2, 5}, {2}};
  flat.inputs = {InputKind::kGaussian, InputKind::kLabels};
  flat.label_classes = 5;
  LayerExample spatial;  // labels [N, 1, H, W] as Caffe segmentation nets give them
  spatial.config = "loss_param { ignore_label: 0 normalization: FULL }";
  spatial.bottom_shapes = {{2, 3, 2, 2}, {2, 1, 2, 2}};
  spatial.inputs = {InputKind::kGaussian, InputKind::kLabels};
  spatial.label_classes = 3;
  LayerExample last_axis;
  last_axis.config = "softmax_param { axis: -1 } loss_param { normalization: BATCH_SIZE }";
  last_axis.bottom_shapes = {{2, 3, 4}, {2, 3}};
  last_axis.inputs = {InputKind::kGaussian, InputKind::kLabels};
  last_axis.label_classes = 4;
  s.examples = {flat, spatial, last_axis};
  return s;
}

double SoftmaxWithLossLayer::slice_loss_cpu(const BlobVec& /*bottom*/, const float* x, int64_t o) const {
  const int64_t C = geom_.channels, inner = geom_.inner;
  const float* mx = row_max_.data<float>();
  const float* sum = row_sum_.data<float>();
  // log p[label] = x[label] - max - log(sum exp(x - max)): finite even when the
  // probability underflows to 0.
  double acc = 0.0;
  for (int64_t i = 0; i < inner; ++i) {
    const int64_t pos = o * inner + i;
    const int32_t l = labels_[static_cast<size_t>(pos)];
    if (l < 0) continue;
    const float logit = x[(o * C + l) * inner + i];
    acc -= static_cast<double>(logit - mx[pos]) - std::log(static_cast<double>(sum[pos]));
  }
  return acc;
}

void SoftmaxWithLossLayer::slice_gradient_cpu(const BlobVec& /*bottom*/, int64_t o, float scale, float* dx) const {
  const int64_t C = geom_.channels, inner = geom_.inner;
  const float* prob = prob_.data<float>() + o * C * inner;
  const int32_t* lo = labels_.data() + o * inner;
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t i = 0; i < inner; ++i) {
      const int32_t l = lo[i];
      // d(-log p_l)/dx_c = p_c - [c == l]; ignored positions get no loss gradient.
      dx[c * inner + i] = l < 0 ? 0.0f : (prob[c * inner + i] - (l == c ? 1.0f : 0.0f)) * scale;
    }
  }
}

STRATA_REGISTER_LAYER("SoftmaxWithLoss", SoftmaxWithLossLayer);

}  // namespace strata
