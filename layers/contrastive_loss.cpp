#include "layers/contrastive_loss.h"

#include <cmath>
#include <string>

#include "framework/layer_registry.h"
#include "layers/loss_layer.h"

namespace strata {

ContrastiveLossLayer::ContrastiveLossLayer(const LayerSpec& spec, const LayerContext& ctx)
    : LossLayer(spec, ctx),
      margin_(static_cast<float>(block("contrastive_loss_param").get_double("margin", 1.0))),
      version_(block("contrastive_loss_param").get_bool("legacy_version", false) ? Version::kLegacy
                                                                                  : Version::kCurrent) {}

LayerSchema ContrastiveLossLayer::schema() {
  LayerSchema s;
  s.summary = "Contrastive loss of feature pairs with a similarity label (Caffe's ContrastiveLoss; margin, legacy_version)";
  s.blocks = {{"contrastive_loss_param", {"margin", "legacy_version"}}};
  // Margins above the typical pair distance (~2.5 for 3 Gaussian features),
  // so dissimilar pairs contribute too.
  LayerExample plain = layer_example("contrastive_loss_param { margin: 5 }", {{4, 3}, {4, 3}, {4}});
  plain.inputs = {InputKind::kGaussian, InputKind::kGaussian, InputKind::kLabels};
  plain.label_classes = 2;
  LayerExample legacy = plain;
  legacy.config = "contrastive_loss_param { margin: 12 legacy_version: true }";
  legacy.bottom_shapes = {{4, 3, 1, 1}, {4, 3, 1, 1}, {4, 1, 1, 1}};  // Caffe's siamese layout
  LayerExample defaults = plain;
  defaults.config = "";
  s.examples = {plain, legacy, defaults};
  return s;
}

void ContrastiveLossLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Tensor& a = bottom[0]->data;
  if (bottom[1]->shape() != a.shape()) {
    shape_error("the two feature bottoms must have the same shape, got " + shape_str(a.shape()) + " and " +
                shape_str(bottom[1]->shape()));
  }
  num_ = loss_batch(a.shape());
  dim_ = num_ > 0 ? a.numel() / num_ : 0;
  if (bottom[2]->numel() != num_) {
    shape_error("expected one similarity label per pair (" + std::to_string(num_) + " for features " +
                shape_str(a.shape()) + "), got labels " + shape_str(bottom[2]->shape()));
  }
  top[0]->resize({});
}

void ContrastiveLossLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const float* a = bottom[0]->data.data<float>();
  const float* b = bottom[1]->data.data<float>();
  const float* y = bottom[2]->data.data<float>();
  diff_.resize(static_cast<size_t>(num_ * dim_));
  dist_sq_.resize(static_cast<size_t>(num_));
  const bool legacy = version_ == Version::kLegacy;
  double total = 0.0;
  for (int64_t j = 0; j < num_; ++j) {
    double sq = 0.0;
    for (int64_t c = 0; c < dim_; ++c) {
      const int64_t i = j * dim_ + c;
      diff_[static_cast<size_t>(i)] = a[i] - b[i];
      sq += static_cast<double>(diff_[static_cast<size_t>(i)]) * diff_[static_cast<size_t>(i)];
    }
    dist_sq_[static_cast<size_t>(j)] = static_cast<float>(sq);
    // Caffe reads the label as static_cast<int>: non-zero after truncation is similar.
    total += contrastive_term(static_cast<float>(sq), static_cast<int>(y[j]) != 0, margin_, legacy);
  }
  top[0]->data.data<float>()[0] = static_cast<float>(total / divisor());
}

void ContrastiveLossLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                        const BlobVec& bottom) {
  const float* y = bottom[2]->data.data<float>();
  const float scale = static_cast<float>(top[0]->diff.data<float>()[0] / divisor());
  const bool legacy = version_ == Version::kLegacy;
  for (int k = 0; k < 2; ++k) {
    if (!propagate_down[k]) continue;
    const float sign = k == 0 ? 1.0f : -1.0f;
    float* dx = bottom[k]->diff.data<float>();
    for (int64_t j = 0; j < num_; ++j) {
      const float f = sign * scale *
                      contrastive_grad_factor(dist_sq_[static_cast<size_t>(j)], static_cast<int>(y[j]) != 0, margin_,
                                              legacy);
      for (int64_t c = 0; c < dim_; ++c) dx[j * dim_ + c] = f * diff_[static_cast<size_t>(j * dim_ + c)];
    }
  }
}

STRATA_REGISTER_LAYER("ContrastiveLoss", ContrastiveLossLayer);

}  // namespace strata
