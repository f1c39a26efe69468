#include "layers/multinomial_logistic_loss.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "framework/layer_registry.h"
#include "layers/loss_layer.h"

namespace strata {

LayerSchema MultinomialLogisticLossLayer::schema() {
  LayerSchema s;
  s.summary = "Negative log likelihood of probabilities at integer labels (Caffe's MultinomialLogisticLoss)";
  LayerExample flat = layer_example("", {{3, 4}, {3}});
  flat.inputs = {InputKind::kPositive, InputKind::kLabels};  // probabilities: positive
  flat.label_classes = 4;
  LayerExample caffe = flat;
  caffe.bottom_shapes = {{2, 5, 1, 1}, {2, 1, 1, 1}};  // Caffe's layout
  caffe.label_classes = 5;
  s.examples = {flat, caffe};
  return s;
}

void MultinomialLogisticLossLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Tensor& p = bottom[0]->data;
  num_ = loss_batch(p.shape());
  dim_ = num_ > 0 ? p.numel() / num_ : (p.ndim() > 0 ? p.count(1) : 1);
  if (bottom[1]->numel() != num_) {
    shape_error("expected one label per sample (" + std::to_string(num_) + " for probabilities " +
                shape_str(p.shape()) + "), got labels " + shape_str(bottom[1]->shape()));
  }
  top[0]->resize({});
}

void MultinomialLogisticLossLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const float* p = bottom[0]->data.data<float>();
  const float* label = bottom[1]->data.data<float>();
  labels_.resize(static_cast<size_t>(num_));
  double total = 0.0;
  for (int64_t j = 0; j < num_; ++j) {
    const int32_t l = class_label(where(), label[j], j, 1, dim_, {});
    labels_[static_cast<size_t>(j)] = l;
    total -= std::log(static_cast<double>(std::max(p[j * dim_ + l], kLossLogThreshold)));
  }
  top[0]->data.data<float>()[0] = static_cast<float>(total / divisor());
}

void MultinomialLogisticLossLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                                const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const float scale = static_cast<float>(-top[0]->diff.data<float>()[0] / divisor());
  const float* p = bottom[0]->data.data<float>();
  float* dx = bottom[0]->diff.data<float>();
  std::fill(dx, dx + num_ * dim_, 0.0f);
  for (int64_t j = 0; j < num_; ++j) {
    const int64_t i = j * dim_ + labels_[static_cast<size_t>(j)];
    dx[i] = scale / std::max(p[i], kLossLogThreshold);
  }
}

STRATA_REGISTER_LAYER("MultinomialLogisticLoss", MultinomialLogisticLossLayer);

}  // namespace strata
