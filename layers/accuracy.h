// Accuracy (Caffe "Accuracy"): fraction of positions whose label is among the
// top_k scores along accuracy_param.axis. Bottoms: scores, labels (class
// indices stored as floats, outer * inner of them). Tops: accuracy scalar,
// optionally per-class accuracy [C]. Not differentiable: no backward.
// Ties (Caffe's rule): a position counts as correct when fewer than top_k
// scores are strictly greater than the label's score.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "framework/layer.h"

namespace strata {

class AccuracyLayer : public Layer {
 public:
  AccuracyLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  int min_bottoms() const override { return 2; }
  int max_bottoms() const override { return 2; }
  int max_tops() const override { return 2; }
  bool can_backward_to(int /*bottom_index*/) const override { return false; }
  // The labels and the accuracies stay f32 in a net that stores activations in 16 bits.
  bool bottom_stays_f32(int bottom_index) const override { return bottom_index == 1; }
  bool top_stays_f32(int /*top_index*/) const override { return true; }

  void reshape(const BlobVec& bottom, const BlobVec& top) override;
  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override;
  void backward_cpu(const BlobVec& /*top*/, const std::vector<bool>& /*propagate_down*/,
                    const BlobVec& /*bottom*/) override {}
  STRATA_CUDA_METHODS;
  bool replays_in_a_graph() const override { return true; }
#ifdef STRATA_WITH_CUDA
  void before_replay() override;  // reports the bad label the last replay found
#endif
  // Scores in bf16 or f16 as they are (the labels and the accuracies stay f32).
  bool takes_storage(DType dtype) const override { return is_float_dtype(dtype); }

 private:
  template <class E>
  void count_cpu(const BlobVec& bottom, const BlobVec& top);
  int64_t top_k_;
  int axis_;
  std::optional<int64_t> ignore_label_;
  int64_t outer_ = 0, channels_ = 0, inner_ = 0;
  std::vector<int64_t> class_total_, class_correct_;  // per class, for the second top

  struct CudaState;  // device scratch and library handles, in layers/accuracy.cu
  std::shared_ptr<CudaState> cuda_;
};

}  // namespace strata
