// Split: hands one bottom to several consumers. The Net's plan makes the
// tops the bottom's own memory where it can (tops_may_share_bottom), and
// forward then copies nothing; otherwise it copies the bottom to each top.
// Backward sums the tops' gradients. The Net inserts it wherever a blob
// feeds more than one layer; it may also be written explicitly.
#pragma once

#include <vector>

#include "framework/layer.h"

namespace strata {

class SplitLayer : public Layer {
 public:
  SplitLayer(const LayerSpec& spec, const LayerContext& ctx) : Layer(spec, ctx) {}
  static LayerSchema schema();
  // Backward sums the tops' gradients only.
  BackwardReads backward_reads() const override { return {false, false}; }
  // Blobs stored in bf16 or f16 are taken as they are, for up to
  // kMaxStoredTops tops: forward copies bytes, backward sums the gradients in
  // f32 and rounds once.
  static constexpr size_t kMaxStoredTops = 8;
  bool takes_storage(DType dtype) const override {
    return dtype == DType::kF32 || (is_float_dtype(dtype) && spec().tops.size() <= kMaxStoredTops);
  }

  int max_tops() const override { return -1; }

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;  // in split.cu
  bool replays_in_a_graph() const override { return true; }
  bool tops_may_share_bottom() const override { return true; }
  // Copies elements as they lie: either layout.
  ChannelsLast channels_last() const override { return ChannelsLast::kTakes; }
};

// Whether the Net made `top` the bottom's own memory: nothing to copy.
inline bool is_bottom_memory(const Tensor& top, const Tensor& bottom) {
  return top.storage_id() == bottom.storage_id() && top.raw_data() == bottom.raw_data();
}

}  // namespace strata
