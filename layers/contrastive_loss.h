// ContrastiveLoss (Caffe "ContrastiveLoss", Hadsell et al. 2006). Bottoms:
// features a and b [N, C, ...] of the same shape, and a similarity label per
// pair [N] (non-zero = similar). With d the Euclidean distance of a pair:
//   loss = sum_n (similar ? d^2 : max(margin - d, 0)^2) / (2 N),
// or with legacy_version: max(margin - d^2, 0) for dissimilar pairs.
// a and b take a gradient, the labels none. Caffe's gradient divides by
// d + 1e-4 rather than d for a dissimilar pair (finite where d is 0), and so
// does this layer, so trained numbers match Caffe's.
#pragma once

#include <memory>
#include <vector>

#include "framework/layer.h"
#include "layers/loss_layer.h"
#include "layers/host_device.h"

namespace strata {

// Caffe's guard added to the distance in the dissimilar-pair gradient.
constexpr float kContrastiveDistanceEpsilon = 1e-4f;

class ContrastiveLossLayer : public LossLayer {
 public:
  ContrastiveLossLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  int min_bottoms() const override { return 3; }
  int max_bottoms() const override { return 3; }
  bool can_backward_to(int bottom_index) const override { return bottom_index < 2; }

  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;
  bool replays_in_a_graph() const override { return true; }

 private:
  enum class Version { kCurrent, kLegacy };

  double divisor() const { return 2.0 * static_cast<double>(num_ > 0 ? num_ : 1); }

  float margin_;
  Version version_;
  int64_t num_ = 0, dim_ = 0;   // pairs, features per pair
  std::vector<float> diff_;     // a - b
  std::vector<float> dist_sq_;  // per pair

  struct CudaState;  // device scratch, in layers/contrastive_loss.cu
  std::shared_ptr<CudaState> cuda_;
};

// A pair's loss term and the factor of its gradient, for the .cpp and the .cu:
// d term/d a = factor * (a - b), with the 1/(2N) and the loss weight outside.
STRATA_HOST_DEVICE float contrastive_term(float dist_sq, bool similar, float margin, bool legacy) {
  if (similar) return dist_sq;
  if (legacy) return fmaxf(margin - dist_sq, 0.0f);
  const float m = fmaxf(margin - sqrtf(dist_sq), 0.0f);
  return m * m;
}
STRATA_HOST_DEVICE float contrastive_grad_factor(float dist_sq, bool similar, float margin, bool legacy) {
  if (similar) return 2.0f;
  if (legacy) return margin - dist_sq > 0.0f ? -2.0f : 0.0f;
  const float dist = sqrtf(dist_sq);
  const float mdist = margin - dist;
  return mdist > 0.0f ? -2.0f * mdist / (dist + kContrastiveDistanceEpsilon) : 0.0f;
}

}  // namespace strata
