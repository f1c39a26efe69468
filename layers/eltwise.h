// Eltwise: element-wise PROD, SUM (with optional per-bottom coefficients) or
// MAX of two or more bottoms of the same shape (Caffe's eltwise_param).
#pragma once

#include <vector>

#include "framework/layer.h"

namespace strata {

class EltwiseLayer : public Layer {
 public:
  enum class Op { kProd, kSum, kMax };
  // How PROD computes d top / d bottom_i: from the other bottoms (exact even
  // when bottom_i is 0) or as top / bottom_i (fewer passes).
  enum class ProdGrad { kStable, kDivide };

  EltwiseLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();
  // SUM scales the gradient and MAX keeps its own argmax; PROD reads both.
  BackwardReads backward_reads() const override {
    return op_ == Op::kProd ? BackwardReads{} : BackwardReads{false, false};
  }

  // Blobs stored in bf16 or f16 are taken as they are, for up to
  // kMaxStoredBottoms bottoms: each element widened, combined in f32 and
  // rounded once.
  static constexpr size_t kMaxStoredBottoms = 8;
  bool takes_storage(DType dtype) const override {
    return dtype == DType::kF32 || (is_float_dtype(dtype) && spec().bottoms.size() <= kMaxStoredBottoms);
  }

  int min_bottoms() const override { return 2; }
  int max_bottoms() const override { return -1; }

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;  // in eltwise.cu
  bool replays_in_a_graph() const override { return true; }
  // Element by element, bottoms of one shape: either layout.
  ChannelsLast channels_last() const override { return ChannelsLast::kTakes; }
  // SUM of two bottoms with unit coefficients: y = a + b in f32, rounded once.
  bool as_residual_sum() const override {
    if (op_ != Op::kSum || spec().bottoms.size() != 2) return false;
    for (float c : coeffs_) {
      if (c != 1.0f) return false;
    }
    return true;
  }

 private:
  // The 16-bit paths (eltwise.cpp): all of one call's blobs in one dtype.
  void forward_stored_cpu(const BlobVec& bottom, const BlobVec& top);
  void backward_stored_cpu(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom);
  void forward_stored_cuda(const BlobVec& bottom, const BlobVec& top);
  void backward_stored_cuda(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom);

  Op op_;
  std::vector<float> coeffs_;  // SUM only; empty until setup() when not given (all 1)
  ProdGrad prod_grad_;
  Tensor argmax_{Shape{0}, DType::kI32};  // MAX: which bottom won each element
};

}  // namespace strata
