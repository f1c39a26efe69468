#include "layers/hinge_loss.h"

#include <cmath>
#include <string>

#include "framework/layer_registry.h"
#include "layers/loss_layer.h"

namespace strata {

HingeLossLayer::HingeLossLayer(const LayerSpec& spec, const LayerContext& ctx)
    : LossLayer(spec, ctx),
      norm_(block("hinge_loss_param").get_enum("norm", {"L1", "L2"}, "L1") == "L2" ? Norm::kL2 : Norm::kL1) {}

LayerSchema HingeLossLayer::schema() {
  LayerSchema s;
  s.summary = "One-vs-all hinge loss of scores against integer labels, L1 or L2 (Caffe's HingeLoss)";
  s.blocks = {{"hinge_loss_param", {"norm"}}};
  // Kinks at s = +-1; the fixed seed's inputs lie more than a step from them.
  LayerExample l1 = layer_example("", {{3, 4}, {3}});
  l1.inputs = {InputKind::kGaussian, InputKind::kLabels};
  l1.label_classes = 4;
  LayerExample l2 = l1;
  l2.config = "hinge_loss_param { norm: L2 }";
  l2.bottom_shapes = {{2, 3, 1, 1}, {2, 1, 1, 1}};  // Caffe's layout
  l2.label_classes = 3;
  s.examples = {l1, l2};
  return s;
}

void HingeLossLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Tensor& x = bottom[0]->data;
  num_ = loss_batch(x.shape());
  dim_ = num_ > 0 ? x.numel() / num_ : (x.ndim() > 0 ? x.count(1) : 1);
  if (bottom[1]->numel() != num_) {
    shape_error("expected one label per sample (" + std::to_string(num_) + " for scores " + shape_str(x.shape()) +
                "), got labels " + shape_str(bottom[1]->shape()));
  }
  top[0]->resize({});
}

void HingeLossLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const float* s = bottom[0]->data.data<float>();
  const float* label = bottom[1]->data.data<float>();
  labels_.resize(static_cast<size_t>(num_));
  for (int64_t j = 0; j < num_; ++j) labels_[static_cast<size_t>(j)] = class_label(where(), label[j], j, 1, dim_, {});
  const bool l2 = norm_ == Norm::kL2;
  const double total = deterministic_sum(num_ * dim_, [&](int64_t i) {
    const float t = hinge_margin(s[i], labels_[static_cast<size_t>(i / dim_)] == i % dim_);
    return l2 ? static_cast<double>(t) * t : static_cast<double>(t);
  });
  top[0]->data.data<float>()[0] = static_cast<float>(total / divisor());
}

void HingeLossLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                  const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const float scale = static_cast<float>(top[0]->diff.data<float>()[0] / divisor());
  const float* s = bottom[0]->data.data<float>();
  float* dx = bottom[0]->diff.data<float>();
  const bool l2 = norm_ == Norm::kL2;
  for (int64_t i = 0; i < num_ * dim_; ++i) {
    dx[i] = scale * hinge_grad(s[i], labels_[static_cast<size_t>(i / dim_)] == i % dim_, l2);
  }
}

STRATA_REGISTER_LAYER("HingeLoss", HingeLossLayer);

}  // namespace strata
