// HingeLoss (Caffe "HingeLoss"): the one-vs-all hinge loss of scores
// [N, C, ...] (C = count / N classes per sample) against labels [N]:
//   t_nk = max(0, 1 + delta_nk * s_nk),  delta = -1 for the label's class, +1 otherwise,
//   loss = sum t / N (norm L1, the default) or sum t^2 / N (L2).
// The labels take no gradient.
#pragma once

#include <memory>
#include <vector>

#include "framework/layer.h"
#include "layers/loss_layer.h"
#include "layers/host_device.h"

namespace strata {

class HingeLossLayer : public LossLayer {
 public:
  HingeLossLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;
  bool replays_in_a_graph() const override { return true; }
#ifdef STRATA_WITH_CUDA
  void before_replay() override;  // reports the bad label the last replay found
#endif

 private:
  enum class Norm { kL1, kL2 };

  double divisor() const { return static_cast<double>(num_ > 0 ? num_ : 1); }

  Norm norm_;
  int64_t num_ = 0, dim_ = 0;
  std::vector<int32_t> labels_;  // checked class index per sample

  struct CudaState;  // device scratch, in layers/hinge_loss.cu
  std::shared_ptr<CudaState> cuda_;
};

// One element's margin term t and d t/d s (before the norm), for the .cpp
// and the .cu. `is_label`: the element is the sample's labelled class.
STRATA_HOST_DEVICE float hinge_margin(float s, bool is_label) { return fmaxf(0.0f, 1.0f + (is_label ? -s : s)); }
// d loss_term / d s for norm L1 (l2 = false): delta * [t > 0]; L2: 2 t delta.
STRATA_HOST_DEVICE float hinge_grad(float s, bool is_label, bool l2) {
  const float t = hinge_margin(s, is_label);
  const float delta = is_label ? -1.0f : 1.0f;
  return l2 ? 2.0f * t * delta : (t > 0.0f ? delta : 0.0f);
}

}  // namespace strata
