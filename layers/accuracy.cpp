#include "layers/accuracy.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "layers/neuron_layer.h"  // with_float_element
#include "layers/softmax_loss.h"

namespace strata {

AccuracyLayer::AccuracyLayer(const LayerSpec& spec, const LayerContext& ctx)
    : Layer(spec, ctx),
      top_k_(block("accuracy_param").get_int("top_k", 1)),
      axis_(static_cast<int>(block("accuracy_param").get_int("axis", 1))) {
  const ConfigNode& p = block("accuracy_param");
  if (top_k_ < 1) {
    fail<ConfigError>(where(), " at ", p.find("top_k")->loc().str(), ": top_k ", top_k_, " must be at least 1");
  }
  if (p.has("ignore_label")) ignore_label_ = p.get_int("ignore_label");
}

LayerSchema AccuracyLayer::schema() {
  LayerSchema s;
  s.summary = "Top-k classification accuracy (optional per-class accuracy top); no gradient";
  s.blocks = {{"accuracy_param", {"top_k", "axis", "ignore_label"}}};
  LayerExample top1;
  top1.bottom_shapes = {{2, 5}, {2}};
  top1.inputs = {InputKind::kGaussian, InputKind::kLabels};
  top1.label_classes = 5;
  top1.gradient = GradientCheck::kNo;
  LayerExample top2 = top1;
  top2.config = "accuracy_param { top_k: 2 ignore_label: 1 }";
  top2.bottom_shapes = {{2, 5, 3}, {2, 3}};
  s.examples = {top1, top2};
  return s;
}

void AccuracyLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  SoftmaxGeometry g;
  const std::string wrong = class_positions("accuracy_param.axis", axis_, bottom[0]->shape(), bottom[1]->shape(), &g);
  if (!wrong.empty()) shape_error(wrong);
  outer_ = g.outer;
  channels_ = g.channels;
  inner_ = g.inner;
  if (top_k_ > channels_) {
    shape_error("top_k " + std::to_string(top_k_) + " exceeds the " + std::to_string(channels_) +
                " classes of scores " + shape_str(bottom[0]->shape()) + "; lower accuracy_param.top_k");
  }
  top[0]->resize({});
  if (top.size() > 1) top[1]->resize({channels_});
  class_total_.resize(static_cast<size_t>(channels_));
  class_correct_.resize(static_cast<size_t>(channels_));
}

void AccuracyLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  // Scores stored in f32, bf16 or f16 (widening keeps their order).
  with_float_element(bottom[0]->data.dtype(), "Accuracy forward",
                     [&](auto e) { count_cpu<decltype(e)>(bottom, top); });
}

template <class E>
void AccuracyLayer::count_cpu(const BlobVec& bottom, const BlobVec& top) {
  const auto* x = static_cast<const typename E::T*>(bottom[0]->data.raw_data());
  const float* label = bottom[1]->data.data<float>();
  std::fill(class_total_.begin(), class_total_.end(), 0);
  std::fill(class_correct_.begin(), class_correct_.end(), 0);
  int64_t total = 0, correct = 0;
  for (int64_t o = 0; o < outer_; ++o) {
    for (int64_t i = 0; i < inner_; ++i) {
      const int64_t pos = o * inner_ + i;
      const int32_t l = class_label(where(), label[pos], pos, inner_, channels_, ignore_label_);
      if (l < 0) continue;
      const auto* xo = x + o * channels_ * inner_ + i;
      const float target = E::load(xo[l * inner_]);
      // A non-finite score anywhere in the row counts as wrong: comparisons
      // with NaN are false, so a NaN model would otherwise look right.
      bool finite = std::isfinite(target);
      int64_t greater = 0;
      for (int64_t c = 0; c < channels_; ++c) {
        const float s = E::load(xo[c * inner_]);
        greater += s > target;
        finite = finite && std::isfinite(s);
      }
      ++total;
      ++class_total_[l];
      if (finite && greater < top_k_) {
        ++correct;
        ++class_correct_[l];
      }
    }
  }
  top[0]->data.data<float>()[0] = total > 0 ? static_cast<float>(static_cast<double>(correct) / total) : 0.0f;
  if (top.size() > 1) {
    float* per_class = top[1]->data.data<float>();
    for (int64_t c = 0; c < channels_; ++c) {
      per_class[c] = class_total_[c] > 0 ? static_cast<float>(static_cast<double>(class_correct_[c]) / class_total_[c])
                                         : 0.0f;
    }
  }
}

STRATA_REGISTER_LAYER("Accuracy", AccuracyLayer);

}  // namespace strata
