// What the Caffe loss layers share (Caffe's LossLayer): the base class that
// gives a loss its bottom counts, loss weight and label rule, how loss_param
// picks the divisor of a summed loss, the check that turns a float label
// into a class index, and sums that give the same bits for any thread count.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/layer.h"
#ifndef __CUDACC__
#include "framework/cpu/threads.h"
#endif

namespace strata {

// A loss: bottoms (predictions, labels), one loss top whose weight is 1 by
// default; the labels take no gradient. A loss with other bottoms or other
// gradient rules overrides those members.
class LossLayer : public Layer {
 public:
  using Layer::Layer;

  int min_bottoms() const override { return 2; }
  int max_bottoms() const override { return 2; }
  float default_loss_weight(int top_index) const override { return top_index == 0 ? 1.0f : 0.0f; }
  bool can_backward_to(int bottom_index) const override { return bottom_index == 0; }
  // Labels and targets (the bottoms that take no gradient) and the loss stay
  // f32 in a net that stores its activations in 16 bits.
  bool bottom_stays_f32(int bottom_index) const override { return !can_backward_to(bottom_index); }
  bool top_stays_f32(int top_index) const override { return top_index == 0; }
};

enum class LossNormalization { kValid, kBatchSize, kFull, kNone };

// loss_param as Caffe reads it: an explicit `normalization` wins, else the
// legacy `normalize` bool (true = VALID, false = BATCH_SIZE), else
// `fallback` (Caffe's default differs by layer: VALID for InfogainLoss,
// BATCH_SIZE for SigmoidCrossEntropyLoss).
LossNormalization read_loss_normalization(const ConfigNode& loss_param, LossNormalization fallback);
std::optional<int64_t> read_ignore_label(const ConfigNode& loss_param);

// The divisor of a summed loss over `outer` samples of `positions` in all,
// `valid` of which count. Never below 1, so an empty or fully ignored batch
// gives loss 0 rather than NaN.
double loss_divisor(LossNormalization mode, int64_t outer, int64_t positions, int64_t valid);

// Caffe's num(): the first dimension, 1 for a scalar. Divisors use
// max(1, it) so that a zero batch gives 0, not 0 / 0.
inline int64_t loss_batch(const std::vector<int64_t>& shape) { return shape.empty() ? 1 : shape[0]; }

// The class index of label value `v` at position `index`, for scores with
// `classes` classes: -1 when it equals the ignore label. Anything else that
// is not a whole number in [0, classes) is an Error naming `where`, the
// value, the index and its sample (index / inner).
int32_t class_label(const std::string& where, float v, int64_t index, int64_t inner, int64_t classes,
                    const std::optional<int64_t>& ignore_label);
// class_label's error: `label` says which ("label 3.5 at index 7").
[[noreturn]] void fail_class_label(const std::string& where, const std::string& label, int64_t index, int64_t inner,
                                   int64_t classes, const std::optional<int64_t>& ignore_label);
// On a GPU a kernel checks the labels and keeps the first bad index
// (device_class_label below, cuda::DeferredIndexCheck); it is reported at the
// next forward, so that no step waits for the GPU. `bad_index` < 0: none.
void report_bad_label_of_previous_batch(const std::string& where, int64_t bad_index, int64_t inner, int64_t classes,
                                        const std::optional<int64_t>& ignore_label);

// Caffe's kLOG_THRESHOLD: probabilities are clamped to it before the log.
constexpr float kLossLogThreshold = 1e-20f;

#ifndef __CUDACC__
// sum_{i < n} term(i) in double, in fixed blocks whose partial sums are added
// in order: the same result for any number of threads.
template <class Term>
double deterministic_sum(int64_t n, const Term& term) {
  constexpr int64_t kBlock = 8192;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
  parallel_for(blocks, 2, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      double s = 0.0;
      const int64_t end = std::min(n, (b + 1) * kBlock);
      for (int64_t i = b * kBlock; i < end; ++i) s += term(i);
      partial[static_cast<size_t>(b)] = s;
    }
  });
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}
#endif

#ifdef __CUDACC__
// class_label on the device: -1 for the ignore label and for a value that is
// not a class index, whose index then goes to *bad (the smallest wins).
__device__ inline int32_t device_class_label(float v, int64_t classes, bool has_ignore, float ignore, int64_t index,
                                             unsigned long long* bad) {
  if (has_ignore && v == ignore) return -1;
  if (!(v >= 0.0f && v < static_cast<float>(classes)) || v != floorf(v)) {
    atomicMin(bad, static_cast<unsigned long long>(index));
    return -1;
  }
  return static_cast<int32_t>(v);
}
#endif

#ifdef STRATA_WITH_CUDA
namespace cuda {
// On the compute stream, in one block (deterministic): top[0] =
// sum(terms[0..n)) / d, where d = max(1, sum(valid[0..n))) when `valid` is
// not null (VALID normalization), else `fixed_divisor`. d is written to
// divisor[0] for the backward kernels, so nothing waits for the GPU.
void loss_total(int64_t n, const float* terms, const float* valid, float fixed_divisor, float* top, float* divisor);
}  // namespace cuda
#endif

}  // namespace strata
