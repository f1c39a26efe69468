#include "layers/sigmoid_cross_entropy_loss.h"

#include <cmath>
#include <string>

#include "framework/layer_registry.h"

namespace strata {

SigmoidCrossEntropyLossLayer::SigmoidCrossEntropyLossLayer(const LayerSpec& spec, const LayerContext& ctx)
    : LossLayer(spec, ctx),
      normalization_(read_loss_normalization(block("loss_param"), LossNormalization::kBatchSize)),
      ignore_label_(read_ignore_label(block("loss_param"))) {}

LayerSchema SigmoidCrossEntropyLossLayer::schema() {
  LayerSchema s;
  s.summary = "Sigmoid + binary cross-entropy against targets in [0, 1] (Caffe's SigmoidCrossEntropyLoss; "
              "ignore_label, VALID/BATCH_SIZE/FULL/NONE normalization, default BATCH_SIZE)";
  s.blocks = {{"loss_param", {"ignore_label", "normalization", "normalize"}}};
  LayerExample binary = layer_example("", {{2, 3, 2}, {2, 3, 2}});
  binary.inputs = {InputKind::kGaussian, InputKind::kLabels};
  binary.label_classes = 2;
  LayerExample soft = layer_example("loss_param { normalization: FULL }", {{3, 4}, {3, 4}});
  soft.inputs = {InputKind::kGaussian, InputKind::kPositive};  // targets need not be 0 or 1
  LayerExample ignore = binary;
  ignore.config = "loss_param { ignore_label: 2 normalization: VALID }";
  ignore.label_classes = 3;  // targets 0, 1 and the ignored 2
  s.examples = {binary, soft, ignore};
  return s;
}

void SigmoidCrossEntropyLossLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  if (bottom[1]->numel() != bottom[0]->numel()) {
    shape_error("the targets must have one value per score: scores " + shape_str(bottom[0]->shape()) +
                ", targets " + shape_str(bottom[1]->shape()) + "; give targets of the scores' count");
  }
  top[0]->resize({});
}

double SigmoidCrossEntropyLossLayer::fixed_divisor(const BlobVec& bottom) const {
  const int64_t n = bottom[0]->numel();
  return loss_divisor(normalization_, loss_batch(bottom[0]->shape()), n, n);
}

void SigmoidCrossEntropyLossLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const int64_t n = bottom[0]->numel();
  const float* x = bottom[0]->data.data<float>();
  const float* t = bottom[1]->data.data<float>();
  const bool has_ignore = ignore_label_.has_value();
  const float ignore = has_ignore ? static_cast<float>(*ignore_label_) : 0.0f;
  const double total = deterministic_sum(n, [&](int64_t i) {
    return has_ignore && t[i] == ignore ? 0.0 : static_cast<double>(sigmoid_cross_entropy(x[i], t[i]));
  });
  int64_t valid = n;
  if (has_ignore) {
    valid = 0;
    for (int64_t i = 0; i < n; ++i) valid += t[i] == ignore ? 0 : 1;
  }
  divisor_ = loss_divisor(normalization_, loss_batch(bottom[0]->shape()), n, valid);
  top[0]->data.data<float>()[0] = static_cast<float>(total / divisor_);
}

void SigmoidCrossEntropyLossLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                                const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const int64_t n = bottom[0]->numel();
  const float scale = static_cast<float>(top[0]->diff.data<float>()[0] / divisor_);
  const float* x = bottom[0]->data.data<float>();
  const float* t = bottom[1]->data.data<float>();
  float* dx = bottom[0]->diff.data<float>();
  const bool has_ignore = ignore_label_.has_value();
  const float ignore = has_ignore ? static_cast<float>(*ignore_label_) : 0.0f;
  parallel_for(n, 32768, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      dx[i] = has_ignore && t[i] == ignore ? 0.0f : sigmoid_cross_entropy_grad(x[i], t[i]) * scale;
    }
  });
}

STRATA_REGISTER_LAYER("SigmoidCrossEntropyLoss", SigmoidCrossEntropyLossLayer);

}  // namespace strata
