#include "layers/softmax_with_loss.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/cpu/threads.h"

namespace strata {
namespace {
constexpr int64_t kMinChunkElements = 32768;
}

SoftmaxWithLossLayer::SoftmaxWithLossLayer(const LayerSpec& spec, const LayerContext& ctx)
    : Layer(spec, ctx), axis_(static_cast<int>(block("softmax_param").get_int("axis", 1))) {
  const ConfigNode& loss = block("loss_param");
  if (loss.has("ignore_label")) ignore_label_ = loss.get_int("ignore_label");
  // Caffe: an explicit normalization wins; otherwise the legacy `normalize`
  // bool picks VALID (true) or BATCH_SIZE (false); the default is VALID.
  std::string mode = "VALID";
  if (loss.has("normalization")) {
    mode = loss.get_enum("normalization", {"VALID", "BATCH_SIZE", "FULL", "NONE"}, "VALID");
  } else if (loss.has("normalize")) {
    mode = loss.get_bool("normalize", true) ? "VALID" : "BATCH_SIZE";
  }
  normalization_ = mode == "VALID"        ? Normalization::kValid
                   : mode == "BATCH_SIZE" ? Normalization::kBatchSize
                   : mode == "FULL"       ? Normalization::kFull
                                          : Normalization::kNone;
}

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

void SoftmaxWithLossLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Tensor& x = bottom[0]->data;
  const int axis = axis_ < 0 ? axis_ + x.ndim() : axis_;
  if (axis < 0 || axis >= x.ndim()) {
    shape_error("softmax_param.axis " + std::to_string(axis_) + " is out of range for scores of shape " +
                shape_str(x.shape()) + "; use an axis in [-" + std::to_string(x.ndim()) + ", " +
                std::to_string(x.ndim()) + ")");
  }
  geom_ = SoftmaxGeometry{x.count(0, axis), x.shape()[axis], x.count(axis + 1)};
  const int64_t positions = geom_.outer * geom_.inner;
  if (bottom[1]->numel() != positions) {
    shape_error("expected one label per score position (" + std::to_string(positions) +
                " labels for scores " + shape_str(x.shape()) + " with classes on axis " + std::to_string(axis) +
                "), got labels " + shape_str(bottom[1]->shape()) +
                "; labels must have the scores' shape with the class axis removed or set to 1");
  }
  top[0]->resize({});
  if (top.size() > 1) top[1]->reshape_like(*bottom[0]);
  prob_.resize(x.shape());
  row_max_.resize({positions});
  row_sum_.resize({positions});
}

double SoftmaxWithLossLayer::normalizer(int64_t valid_count) const {
  double n = 1.0;
  switch (normalization_) {
    case Normalization::kValid: n = static_cast<double>(valid_count); break;
    case Normalization::kBatchSize: n = static_cast<double>(geom_.outer); break;
    case Normalization::kFull: n = static_cast<double>(geom_.outer * geom_.inner); break;
    case Normalization::kNone: n = 1.0; break;
  }
  return std::max(1.0, n);
}

void SoftmaxWithLossLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const int64_t C = geom_.channels, inner = geom_.inner;
  const float* label = bottom[1]->data.data<float>();
  // Host scratch is sized here, not in reshape(), so that the Net's memory
  // plan (made from reshape()) is checked before any of it is taken.
  labels_.resize(static_cast<size_t>(geom_.outer * inner));
  outer_loss_.resize(static_cast<size_t>(geom_.outer));
  // Checked serially first: errors cannot be thrown out of the threaded loop.
  valid_count_ = 0;
  for (size_t k = 0; k < labels_.size(); ++k) {
    const float v = label[k];
    if (ignore_label_ && v == static_cast<float>(*ignore_label_)) {
      labels_[k] = -1;
      continue;
    }
    if (!(v >= 0.0f && v < static_cast<float>(C)) || v != std::floor(v)) {
      fail<Error>(where(), ": label ", v, " at index ", k, " (sample ", static_cast<int64_t>(k) / inner,
                  ") is not a class index in [0, ", C, ")",
                  ignore_label_ ? " or the ignore_label " + std::to_string(*ignore_label_) : std::string(),
                  "; check the labels or the number of scores (", C, " on the class axis)",
                  ignore_label_ ? "" : ", or set loss_param { ignore_label: ... }");
    }
    labels_[k] = static_cast<int32_t>(v);
    ++valid_count_;
  }

  const float* x = bottom[0]->data.data<float>();
  float* prob = prob_.data<float>();
  float* mx = row_max_.data<float>();
  float* sum = row_sum_.data<float>();
  softmax_forward(geom_, x, prob, mx, sum);
  // log p[label] = x[label] - max - log(sum exp(x - max)): finite even when the
  // probability underflows to 0.
  const int64_t chunk = std::max<int64_t>(1, kMinChunkElements / std::max<int64_t>(1, inner));
  parallel_for(geom_.outer, chunk, [&](int64_t ob, int64_t oe) {
    for (int64_t o = ob; o < oe; ++o) {
      double acc = 0.0;
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t pos = o * inner + i;
        const int32_t l = labels_[pos];
        if (l < 0) continue;
        const float logit = x[(o * C + l) * inner + i];
        acc -= static_cast<double>(logit - mx[pos]) - std::log(static_cast<double>(sum[pos]));
      }
      outer_loss_[o] = acc;
    }
  });
  double total = 0.0;
  for (double v : outer_loss_) total += v;
  top[0]->data.data<float>()[0] = static_cast<float>(total / normalizer(valid_count_));
  if (top.size() > 1) top[1]->data.copy_from(prob_);
}

void SoftmaxWithLossLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                        const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const int64_t C = geom_.channels, inner = geom_.inner;
  const float scale = static_cast<float>(top[0]->diff.data<float>()[0] / normalizer(valid_count_));
  const float* prob = prob_.data<float>();
  // A gradient arriving at the probabilities top goes back through the softmax
  // too (Caffe drops it). Nothing writes that diff when no layer consumes the
  // probabilities, so it is then zero and adds nothing.
  const float* dprob = top.size() > 1 ? top[1]->diff.data<float>() : nullptr;
  float* dx = bottom[0]->diff.data<float>();
  const int64_t chunk = std::max<int64_t>(1, kMinChunkElements / std::max<int64_t>(1, C * inner));
  parallel_for(geom_.outer, chunk, [&](int64_t ob, int64_t oe) {
    for (int64_t o = ob; o < oe; ++o) {
      const int32_t* lo = labels_.data() + o * inner;
      for (int64_t c = 0; c < C; ++c) {
        const int64_t base = (o * C + c) * inner;
        for (int64_t i = 0; i < inner; ++i) {
          const int32_t l = lo[i];
          // d(-log p_l)/dx_c = p_c - [c == l]; ignored positions get no loss gradient.
          dx[base + i] = l < 0 ? 0.0f : (prob[base + i] - (l == c ? 1.0f : 0.0f)) * scale;
        }
      }
      if (!dprob) continue;
      // Softmax backward: dx_c += p_c * (dp_c - sum_k dp_k p_k), per position.
      for (int64_t i = 0; i < inner; ++i) {
        double dot = 0.0;
        for (int64_t c = 0; c < C; ++c) {
          const int64_t k = (o * C + c) * inner + i;
          dot += static_cast<double>(dprob[k]) * prob[k];
        }
        for (int64_t c = 0; c < C; ++c) {
          const int64_t k = (o * C + c) * inner + i;
          dx[k] += prob[k] * (dprob[k] - static_cast<float>(dot));
        }
      }
    }
  });
}

STRATA_REGISTER_LAYER("SoftmaxWithLoss", SoftmaxWithLossLayer);

}  // namespace strata
