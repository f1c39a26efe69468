#include "layers/softmax_loss.h"

#include <algorithm>
#include <string>

#include "framework/cpu/threads.h"
#include "framework/error.h"
#include "framework/scratch.h"

namespace strata {
namespace {
constexpr int64_t kMinChunkElements = 32768;
}

std::string class_positions(const std::string& axis_key, int axis_param, const Shape& scores, const Shape& labels,
                            SoftmaxGeometry* g) {
  const int ndim = static_cast<int>(scores.size());
  const int axis = axis_param < 0 ? axis_param + ndim : axis_param;
  if (axis < 0 || axis >= ndim) {
    return axis_key + " " + std::to_string(axis_param) + " is out of range for scores of shape " + shape_str(scores) +
           "; use an axis in [-" + std::to_string(ndim) + ", " + std::to_string(ndim) + ")";
  }
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= scores[static_cast<size_t>(d)];
  for (int d = axis + 1; d < ndim; ++d) inner *= scores[static_cast<size_t>(d)];
  *g = SoftmaxGeometry{outer, scores[static_cast<size_t>(axis)], inner};
  const int64_t positions = outer * inner;
  int64_t label_count = 1;
  for (int64_t d : labels) label_count *= d;
  if (label_count != positions) {
    return "expected one label per score position (" + std::to_string(positions) + " labels for scores " +
           shape_str(scores) + " with classes on axis " + std::to_string(axis) + "), got labels " +
           shape_str(labels) + "; labels must have the scores' shape with the class axis removed or set to 1";
  }
  return "";
}

SoftmaxLossLayer::SoftmaxLossLayer(const LayerSpec& spec, const LayerContext& ctx, const std::string& axis_block,
                                   LossNormalization normalization)
    : LossLayer(spec, ctx),
      axis_key_(axis_block + ".axis"),
      axis_(static_cast<int>(block(axis_block).get_int("axis", 1))),
      ignore_label_(read_ignore_label(block("loss_param"))),
      normalization_(read_loss_normalization(block("loss_param"), normalization)) {}

void SoftmaxLossLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const std::string wrong = class_positions(axis_key_, axis_, bottom[0]->shape(), bottom[1]->shape(), &geom_);
  if (!wrong.empty()) shape_error(wrong);
  const int64_t positions = geom_.outer * geom_.inner;
  top[0]->resize({});
  probability_top_ = top.size() > 1;
  if (probability_top_) top[1]->reshape_like(*bottom[0]);
  prob_.resize(bottom[0]->shape());
  row_max_.resize({positions});
  row_sum_.resize({positions});
}

size_t SoftmaxLossLayer::f32_scratch(int tensors) const {
  ScratchCarver c;
  for (int k = 0; k < tensors; ++k) c.take({geom_.outer, geom_.channels, geom_.inner});
  return c.bytes();
}

// The scores in f32 (forward), their gradient in f32 and the probabilities'
// gradient widened (backward).
size_t SoftmaxLossLayer::scratch_bytes() const {
  return call_dtype() == DType::kF32 ? 0 : f32_scratch(probability_top_ ? 2 : 1);
}

void SoftmaxLossLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const int64_t C = geom_.channels, inner = geom_.inner, positions = geom_.outer * inner;
  const float* label = bottom[1]->data.data<float>();
  // Host scratch is sized here, not in reshape(), so that the Net's memory
  // plan (made from reshape()) is checked before any of it is taken.
  labels_.resize(static_cast<size_t>(positions));
  outer_loss_.resize(static_cast<size_t>(geom_.outer));
  // Checked serially first: errors cannot be thrown out of the threaded loop.
  int64_t valid = 0;
  for (int64_t k = 0; k < positions; ++k) {
    labels_[static_cast<size_t>(k)] = class_label(where(), label[k], k, inner, C, ignore_label_);
    valid += labels_[static_cast<size_t>(k)] >= 0 ? 1 : 0;
  }
  const bool wide = bottom[0]->data.dtype() != DType::kF32;
  ScratchCarver carve = wide ? ScratchCarver(scratch(f32_scratch(1))) : ScratchCarver();
  const Tensor xt = carve.f32_of(bottom[0]->data);
  const float* x = xt.data<float>();
  softmax_forward(geom_, x, prob_.data<float>(), row_max_.data<float>(), row_sum_.data<float>());
  const int64_t chunk = std::max<int64_t>(1, kMinChunkElements / std::max<int64_t>(1, C * inner));
  parallel_for(geom_.outer, chunk, [&](int64_t ob, int64_t oe) {
    for (int64_t o = ob; o < oe; ++o) outer_loss_[static_cast<size_t>(o)] = slice_loss_cpu(bottom, x, o);
  });
  double total = 0.0;
  for (double v : outer_loss_) total += v;
  divisor_ = loss_divisor(normalization_, geom_.outer, positions, valid);
  top[0]->data.data<float>()[0] = static_cast<float>(total / divisor_);
  if (probability_top_) cast_into(top[1]->data, prob_);
}

void SoftmaxLossLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                    const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const int64_t C = geom_.channels, inner = geom_.inner;
  if (geom_.outer * inner == 0) return;  // nothing to write
  prepare_backward_cpu(bottom);
  const float scale = static_cast<float>(top[0]->diff.data<float>()[0] / divisor_);
  const float* prob = prob_.data<float>();
  const bool wide = bottom[0]->diff.dtype() != DType::kF32;
  ScratchCarver carve = wide ? ScratchCarver(scratch(f32_scratch(probability_top_ ? 2 : 1))) : ScratchCarver();
  Tensor dxt = carve.f32_for(bottom[0]->diff);
  // Nothing writes the probabilities' diff when no layer consumes them, so
  // it is then zero and adds nothing.
  const Tensor dprobt = probability_top_ ? carve.f32_of(top[1]->diff) : Tensor();
  const float* dprob = probability_top_ ? dprobt.data<float>() : nullptr;
  float* dx = dxt.data<float>();
  const int64_t chunk = std::max<int64_t>(1, kMinChunkElements / std::max<int64_t>(1, C * inner));
  parallel_for(geom_.outer, chunk, [&](int64_t ob, int64_t oe) {
    for (int64_t o = ob; o < oe; ++o) {
      slice_gradient_cpu(bottom, o, scale, dx + o * C * inner);
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
  if (wide) cast_into(bottom[0]->diff, dxt);
}

}  // namespace strata
