// Dropout (Caffe "Dropout"), inverted: at TRAIN each element is kept with
// probability 1 - dropout_ratio and scaled by 1 / (1 - dropout_ratio); at TEST
// the layer is the identity. The mask comes from the layer's rng_, so runs are
// reproducible and save_state()/load_state() resume the same mask stream.
// May run in place (backward uses only the stored mask).
#pragma once

#include <memory>

#include "layers/neuron_layer.h"

namespace strata {

class DropoutLayer : public NeuronLayer {
 public:
  DropoutLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();
  // Backward reads its own mask only.
  BackwardReads backward_reads() const override { return {false, false}; }
  // Blobs stored in bf16 or f16 are taken as they are: each kept element
  // widened, scaled in f32 and rounded.
  bool takes_storage(DType dtype) const override { return takes_float_storage(dtype); }

  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;  // in dropout.cu
  // A replayed forward reads its seed from the device, where before_replay
  // queues the one forward would have drawn: the same masks as eager steps.
  bool replays_in_a_graph() const override { return true; }
  // NHWC blobs too, with the NCHW net's mask: each element's draw follows
  // its NCHW index, whatever its place in memory.
  ChannelsLast channels_last() const override { return ChannelsLast::kTakes; }
  // An NHWC blob as [N, C, spatial] (channels 0: the call's order is NCHW's).
  struct ChannelsLastIndex {
    int64_t channels = 0, spatial = 0;
    bool active() const { return channels > 0; }
  };
#ifdef STRATA_WITH_CUDA
  void before_replay() override;
#endif

 private:
  // Ratio 0 at TRAIN behaves like TEST and draws nothing from rng_.
  bool is_identity() const { return phase() == Phase::kTest || ratio_ == 0.0f; }
  // The blob as [N, C, spatial] when the call is NHWC and that differs from
  // NCHW (rank 3 or more), so that memory position j = (n * spatial + s) * C + c
  // has the NCHW index (n * C + c) * spatial + s; {0, 0} otherwise.
  ChannelsLastIndex channels_last_index(const Shape& s) const {
    if (call_layout() != Layout::kNHWC || s.size() < 3) return {};
    int64_t spatial = 1;
    for (size_t k = 2; k < s.size(); ++k) spatial *= s[k];
    return {s[1], spatial};
  }

  float ratio_;
  float scale_;  // 1 / (1 - ratio_)
  Tensor mask_;  // u8, 1 = kept; valid after a TRAIN forward
  Tensor seed_slot_;  // GPU, step graphs: the replayed forward's seed (8 bytes)
#ifdef STRATA_WITH_CUDA
  struct SeedRing;  // the seeds' pinned host copies (dropout.cu)
  std::shared_ptr<SeedRing> seeds_;
#endif
};

}  // namespace strata
