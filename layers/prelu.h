// PReLU (Caffe "PReLU", PyTorch nn.PReLU): y = x for x > 0, a_c * x
// otherwise, with a learned slope a_c per channel (axis 1), or one slope for
// all with channel_shared. Param `weight` [C] (or [1] when shared), filler
// default constant 0.25. May run in place (it then keeps a copy of the input
// for backward, as the slope may be negative). Backward:
//   dx = dy * (x > 0 ? 1 : a_c),   da_c += sum over x <= 0 of dy * x.
//
// The per-element formulas are shared by prelu.cpp and prelu.cu.
#pragma once

#include <cstdint>
#include <vector>

#include "framework/filler.h"
#include "framework/layer.h"
#include "layers/host_device.h"

namespace strata {

struct PReLUGeometry {
  int64_t channels;  // 1 when shared
  int64_t inner;     // elements per channel of one item (1 when shared)

  STRATA_HOST_DEVICE int64_t channel(int64_t k) const { return k / inner % channels; }
  STRATA_HOST_DEVICE float forward(int64_t k, float x, const float* a) const { return x > 0.0f ? x : a[channel(k)] * x; }
  STRATA_HOST_DEVICE float backward(int64_t k, float x, float dy, const float* a) const {
    return x > 0.0f ? dy : a[channel(k)] * dy;
  }
};

class PReLULayer : public Layer {
 public:
  PReLULayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  bool supports_in_place() const override { return true; }

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;  // in prelu.cu
  bool replays_in_a_graph() const override { return true; }

 private:
  enum class Shared { kNo, kYes };
  void check_bottom(const Shape& s) const;

  Shared shared_;
  FillerSpec filler_;
  PReLUGeometry geom_{1, 1};
  int64_t outer_ = 0;  // items (the batch), or 1 when shared
  Tensor x_copy_;      // the input, kept when in place
  Tensor neg_;         // CUDA: min(x, 0) for the slope gradient
};

}  // namespace strata
