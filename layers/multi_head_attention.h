// MultiHeadAttention (PyTorch nn.MultiheadAttention, batch_first, self-
// attention, no mask): bottom x [N, T, D] -> top [N, T, D].
//   [q k v] = x in_proj_weight^T + in_proj_bias            ([N, T, 3D])
//   per head h (dh = D / num_heads columns of q, k, v):
//     P_h = softmax(q_h k_h^T / sqrt(dh)) (rows),  o_h = P_h v_h
//   y = [o_1 ... o_H] out_proj_weight^T + out_proj_bias
// Params in torch's layout: in_proj_weight [3D, D] (rows q, then k, then v),
// in_proj_bias [3D], out_proj_weight [D, D], out_proj_bias [D] (biases only
// with bias_term).
//
// The attention itself runs per (sample, head) pair, heads as the outer
// dimension of the work: head_begin()/head_end() bound the heads this layer
// computes, and every per-head buffer is sized by their count, so splitting
// heads across ranks (tensor parallelism) only has to narrow that range and
// the matching rows of in_proj / columns of out_proj.
#pragma once

#include <memory>
#include <string>

#include "framework/filler.h"
#include "framework/layer.h"
#include "framework/scratch.h"
#include "framework/tensor_parallel.h"

namespace strata {

class MultiHeadAttentionLayer : public Layer {
 public:
  MultiHeadAttentionLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();
  // What backward reads: the input (the weight gradients) and its own q, k, v and context; never the output.
  BackwardReads backward_reads() const override { return {true, false}; }
  // Blobs stored in bf16 or f16 are taken as they are (not with split: the
  // tensor-parallel sums are in f32), with autocast's numerics: every
  // product multiplies 16-bit operands and sums in f32, every tensor between
  // them is stored in that dtype, rounded once as it is written:
  //   forward:  q k v (after the projection and its bias), the probabilities
  //             P (softmax in f32 of the f32 scores), the context P V, y;
  //   backward: d ctx, dV, dS (the scores' gradient, in f32 from the f32
  //             P and dP), dQ and dK, dx.
  // A GPU runs these on tensor cores (16-bit operands, the weights' 16-bit
  // copies made once per forward); the CPU widens what it reads (in blocks
  // of rows and per head) and rounds at the same points, so the two give
  // the same values up to the order of the sums. What forward keeps (q, k,
  // v and the context) is stored in that dtype; the weights and their
  // gradients stay f32.
  bool takes_storage(DType dtype) const override {
    return dtype == DType::kF32 || (is_float_dtype(dtype) && !tp_.active());
  }

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  // The projections, plus QK^T and the weighted sum of V (2 N T T D each).
  ForwardCost forward_cost(const BlobVec& bottom, const BlobVec& top) const override;
  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;
  // Tensor parallel reduces through a communicator the host drives.
  bool replays_in_a_graph() const override { return !tp_.active(); }
  // Tensor parallel (attention_param { split: HEADS }): this rank's rows of
  // in_proj (its heads' q, k and v) and columns of out_proj.
  ParamShard param_shard(size_t param_index) const override;
  // CPU: the heads' per-thread tiles; in TRAIN also ctx's and qkv's
  // gradients. GPU: GpuScratch, forward's or (TRAIN) backward's if larger.
  size_t scratch_bytes() const override;
  // The projection and the heads' outputs (Kept); the probabilities are
  // recomputed in backward from q and k, so the T x T block per head lives
  // only inside a call.
  size_t kept_bytes() const override;

 private:
  enum class Bias { kNo, kYes };

  // The heads this layer computes: all of them, or with split: HEADS over
  // T ranks, rank r's [r*H/T, (r+1)*H/T). Forward then allreduces the
  // out_proj partial sums (adding its bias once), backward the input gradient.
  int64_t head_begin() const { return tp_.rank * num_heads_ / tp_.size; }
  int64_t head_end() const { return (tp_.rank + 1) * num_heads_ / tp_.size; }
  int64_t local_heads() const { return head_end() - head_begin(); }

  void check_bottom(const Shape& s) const;
  // The GPU's calls on 16-bit blobs (multi_head_attention.cu).
  void forward_stored_cuda(const Tensor& x, Tensor& y);
  void backward_stored_cuda(const Tensor& dy, const Tensor& x, Tensor* dx);
  // The CPU calls for blobs whose elements E describes (layers/neuron_layer.h).
  template <class E>
  void forward_cpu_as(const Tensor& x, Tensor& y);
  template <class E>
  void backward_cpu_as(const Tensor& dy, const Tensor& x, bool propagate, Tensor& dx);
  // Runs body(item, worker) for every (sample, local head) item, item =
  // n * local_heads() + (h - head_begin()), on the threads when gemm() can
  // run single-threaded inside them; worker < item_workers().
  template <typename Body>
  void for_each_item(const Body& body);
  int64_t item_workers() const;
  // The CPU scratch of one call (framework/scratch.h): per worker q, k, v,
  // o, do [T, dh] each, then P and dP [T, T]; in backward also the gradients
  // of the heads' outputs [N, T, D] and of the projection [N, T, 3D].
  // With 16-bit blobs also two f32 buffers for blocks of block_rows() rows:
  // wide_a [rows, D] and wide_b [rows, 3D] (the input, the context, the
  // output and their gradients, widened or before rounding).
  struct CpuScratch {
    Tensor items, dctx, dqkv;
    Tensor wide_a, wide_b;
  };
  // The rows of [N * T, ...] a CPU call handles at once: all of them in
  // f32 (pointers into the blobs themselves); with 16-bit blobs as many as
  // keep wide_b within 4 MiB.
  int64_t block_rows() const;
  CpuScratch lay_out_scratch(ScratchCarver& c, bool backward) const;
  // What forward keeps for backward (Layer::kept), in the call dtype: the
  // input projection [N, T, 3D] (on a GPU the same values head-major,
  // [3, N, H, T, dh]: q, k, v) and the heads' outputs side by side
  // [N, T, D], the input of out_proj. On a GPU with 16-bit blobs also the
  // weights' 16-bit copies (in_proj's, out_proj's), rounded by the forward.
  // Not the probabilities [N, H, T, T]: backward computes them again from q
  // and k with forward's own calls (the same bits), as PyTorch's
  // scaled-dot-product attention does; on ViT-B/16 they were 45% of a
  // block's kept bytes.
  // With the fused kernels also each row's log-sum-exp [N, H, T] (f32).
  struct Kept {
    Tensor qkv, ctx;
    Tensor w_in, w_out;  // GPU, 16-bit blobs only
    Tensor lse;          // GPU, fused
  };
  Kept lay_out_kept(ScratchCarver& c) const;
  // This call's scratch and the kept block, carved (forward and backward alike).
  CpuScratch take_scratch(bool backward);
  Kept take_kept();
  // The GPU's scratch of one call, every tensor in the call dtype but the
  // f32 scores. Forward: the projection [N, T, 3D], the scores and then
  // probabilities P [N, H, T, T] (f32), P in the call dtype (16-bit blobs
  // only: the operand of P V) and the heads' outputs head-major
  // [N, H, T, dh]. Backward: P again (both), d ctx [N, T, D], its heads
  // [N, H, T, dh], dP and then dS [N, H, T, T] (f32), dQ dK dV head-major
  // [3, N, H, T, dh] (one block) and the same in rows [N, T, 3D].
  // With the fused kernels (fused()) no P, dP or P in the call dtype, but
  // backward's row dots rowsum(dO * O) [N, H, T] (f32).
  struct GpuScratch {
    Tensor qkv, probs, probs_stored, o;      // forward (probs in both)
    Tensor dctx, dout, dp, dheads, dqkv;     // backward
    Tensor row_dots;                         // backward, fused
  };
  GpuScratch lay_out_gpu_scratch(ScratchCarver& c, bool backward) const;
  GpuScratch take_gpu_scratch(bool backward);

  // Whether this call runs the fused attention kernels
  // (multi_head_attention_flash.h): on a GPU, with 16-bit blobs, unless
  // attention_param { fused: false } or the GPU cannot (fused_why_not_).
  bool fused() const;

  int64_t num_heads_;
  bool fused_requested_ = true;
  std::string fused_why_not_;  // set at setup on a GPU: "" when the fused kernels run there
  TpGroup tp_;  // active only with split: HEADS over > 1 rank
  Bias bias_;
  FillerSpec weight_filler_;
  FillerSpec bias_filler_;
  int in_w_ = 0, in_b_ = -1, out_w_ = 0, out_b_ = -1;  // param indices (-1: none)

  int64_t d_ = 0;   // embedding dim, fixed at setup
  int64_t dh_ = 0;  // per-head dim
  int64_t n_ = 0, t_ = 0;

  int64_t scratch_floats_ = 0;  // per worker (CPU)
};

}  // namespace strata
