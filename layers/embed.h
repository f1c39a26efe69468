// Embed (Caffe "Embed", PyTorch nn.Embedding): looks up rows of a learned
// table. Bottom: indices in [0, input_dim) stored as floats, any shape.
// Top: the bottom's shape + [num_output]. Params: `weight` [input_dim,
// num_output] and, with bias_term, `bias` [num_output] added to every row.
// The indices take no gradient; a row's weight gradient is the sum of the
// top gradients of the positions that chose it.
#pragma once

#include <memory>
#include <vector>

#include "framework/filler.h"
#include "framework/layer.h"

namespace strata {

class EmbedLayer : public Layer {
 public:
  EmbedLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  bool can_backward_to(int /*bottom_index*/) const override { return false; }
  // Its indices stay f32 in a net that stores activations in 16 bits.
  bool bottom_stays_f32(int /*bottom_index*/) const override { return true; }

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  STRATA_CPU_METHODS;
  bool replays_in_a_graph() const override { return true; }
#ifdef STRATA_WITH_CUDA
  STRATA_CUDA_METHODS;
  void before_replay() override;  // reports the bad index the last replay found

 private:
  struct CudaState;  // the deferred index check, in layers/embed.cu
  std::shared_ptr<CudaState> cuda_;
  void report_bad_index(int64_t bad) const;  // of the previous batch, if any (>= 0)
#endif

 private:
  enum class Bias { kNo, kYes };
  // ShapeError for index value v at position i of the bottom (not an integer in [0, input_dim)).
  [[noreturn]] void bad_index(int64_t i, float v, const Shape& bottom_shape) const;

  int64_t num_output_;
  int64_t input_dim_;
  Bias bias_;
  FillerSpec weight_filler_;
  FillerSpec bias_filler_;
  int64_t positions_ = 0;  // indices in the bottom, set by reshape()
};

}  // namespace strata
