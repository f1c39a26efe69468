// PositionEmbedding (ViT): optionally prepends a learned class token to the
// tokens, then adds a learned position embedding.
//   class_token: true  (default)  [N, T, D] -> [N, T + 1, D]
//   class_token: false            [N, T, D] -> [N, T, D]
// Params: "class_token" [1, 1, D] (only with class_token: true; first) and
// "pos_embedding" [1, T(+1), D] (torchvision's class_token and
// encoder.pos_embedding, timm's cls_token and pos_embed). T is fixed at setup.
#pragma once

#include "framework/filler.h"
#include "framework/layer.h"

namespace strata {

class PositionEmbeddingLayer : public Layer {
 public:
  PositionEmbeddingLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();
  // What backward reads: the gradient passes through and sums; no values.
  BackwardReads backward_reads() const override { return {false, false}; }
  // Blobs stored in bf16 or f16 are taken as they are: each sum in f32,
  // rounded once; the parameters and their gradients stay f32.
  bool takes_storage(DType dtype) const override { return is_float_dtype(dtype); }

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  STRATA_CPU_METHODS;

 private:
  enum class ClassToken { kNo, kYes };

  int64_t extra() const { return class_token_ == ClassToken::kYes ? 1 : 0; }
  Blob& pos_embedding() { return param(class_token_ == ClassToken::kYes ? 1 : 0); }

  ClassToken class_token_;
  FillerSpec filler_;
  int64_t t_ = 0, d_ = 0;  // bottom tokens and dim, fixed at setup
  int64_t n_ = 0;

 public:
  STRATA_CUDA_METHODS;  // in position_embedding.cu
  bool replays_in_a_graph() const override { return true; }
};

}  // namespace strata
