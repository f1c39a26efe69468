// BatchNorm: normalises each channel of [N, C] or [N, C, *] input to zero mean
// and unit variance (Caffe's batch_norm_param; pair it with Scale for the
// affine part). The statistics are stored PyTorch-style so weights convert
// directly: params "running_mean" [C] (init 0) and "running_var" [C] (init 1),
// both not learnable, updated in TRAIN as
//   running = maf * running + (1 - maf) * batch_stat
// with the unbiased batch variance, i.e. torch BatchNorm with momentum = 1 - maf.
#pragma once

#include <vector>

#include "framework/layer.h"
#include "framework/scratch.h"

namespace strata {

class BatchNormLayer : public Layer {
 public:
  // Where the normalising mean and variance come from.
  enum class Stats { kBatch, kGlobal };

  BatchNormLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();
  // What backward reads: 1/std, and with batch statistics the normalised
  // input, which is what the top holds after forward: the top itself, or,
  // where a later layer overwrites the top in place (Scale or ReLU on one
  // blob, Caffe's habit), a copy kept for backward.
  BackwardReads backward_reads() const override { return {false, stats_ == Stats::kBatch && !keeps_x_norm()}; }
  // Blobs stored in bf16 or f16 are taken as they are: the statistics and
  // the arithmetic in f32 (sums in double), each output rounded once; the
  // normalised input kept for backward is what the top holds, in the same
  // dtype. The statistics stay f32.
  bool takes_storage(DType dtype) const override { return is_float_dtype(dtype); }
  // With batch statistics and a top that a later layer overwrites: the
  // normalised input (in the call dtype), from forward to backward (Kept).
  size_t kept_bytes() const override;

  bool supports_in_place() const override { return true; }
  // Frozen BatchNorm (fine-tuning): normalise with the running statistics in
  // TRAIN too, and leave them as they are.
  void set_stats(Stats stats) { stats_ = stats; }
  bool freeze_statistics() override {
    stats_ = Stats::kGlobal;
    return true;
  }
  Stats stats() const { return stats_; }

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;  // in batch_norm.cu
  bool replays_in_a_graph() const override { return true; }
  // NHWC blobs too: as [N * H * W, C, 1] (reshape), the same sums in the
  // same order, so the NCHW bits.
  ChannelsLast channels_last() const override { return ChannelsLast::kTakes; }

 private:
  void check_shape(const Shape& s) const;
  // Whether backward reads the normalised input from a copy (Kept) rather
  // than from the top: only where a later layer overwrites the top.
  bool keeps_x_norm() const { return stats_ == Stats::kBatch && tops_overwritten_later(); }
  // What forward keeps for backward (keeps_x_norm() only): x_norm, the
  // normalised input, in the call dtype. Placed by the net's plan.
  struct Kept {
    Tensor x_norm;
  };
  Kept lay_out_kept(ScratchCarver& c) const;
  Kept take_kept();
  // mean_ and var_ (biased) of x per channel; x stored as T, widened by E.
  template <class E>
  void compute_batch_stats(const typename E::T* x);

  Stats stats_;
  float moving_average_fraction_;
  float eps_;
  int64_t num_ = 0, channels_ = 0, spatial_ = 0;  // bottom as [N, C, spatial] (NHWC: [N * spatial, C, 1])
  // Per channel, from forward to backward.
  Tensor mean_;     // [C] mean used to normalise
  Tensor var_;      // [C] biased batch variance (batch mode)
  Tensor inv_std_;  // [C] 1 / sqrt(var + eps)
  Tensor grad_means_;  // [2, C] backward scratch: mean(dy), mean(dy * x_norm)
  Tensor row_partials_;  // NHWC on a GPU: the per-channel sums' slab partials (cuda::channel_row_sums)
};

}  // namespace strata
