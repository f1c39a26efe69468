// GELU (PyTorch F.gelu): y = x * Phi(x), Phi the standard normal CDF, exact
// (erf) by default or torch's tanh approximation with `approximate: TANH`.
// May run in place: then forward keeps a copy of the input for backward.
#pragma once

#include "framework/layer.h"

namespace strata {

class GELULayer : public Layer {
 public:
  GELULayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  bool supports_in_place() const override { return true; }
  void setup(const BlobVec& /*bottom*/, const BlobVec& /*top*/) override {}
  void reshape(const BlobVec& bottom, const BlobVec& top) override;
  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override;
  void backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                    const BlobVec& bottom) override;

 private:
  enum class Approximate { kNone, kTanh };

  Approximate approximate_;
  Tensor input_copy_;  // the input, kept only when running in place

#ifdef STRATA_WITH_CUDA
 public:
  bool has_cuda() const override { return true; }
  void forward_cuda(const BlobVec& bottom, const BlobVec& top) override;
  void backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                     const BlobVec& bottom) override;
#endif
};

}  // namespace strata
