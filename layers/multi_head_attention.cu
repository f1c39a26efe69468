// MultiHeadAttention on the GPU. The math is multi_head_attention.cpp's; the
// per-(sample, head) products run as cuBLAS strided-batched GEMMs over all
// N * local_heads() pairs at once, which needs each head's q, k, v (and o)
// as dense [T, dh] blocks: a permutation kernel moves them between the
// token-major projection layout [N, T, S, heads, dh] (S = 3 for q, k, v;
// 1 for the context) and the head-major layout [S, N, heads, T, dh].
//
// Tensor parallel (split: HEADS) works as on the CPU: the layer holds only
// its heads' rows of in_proj and columns of out_proj, and the out_proj
// partial sums and the input gradient are allreduced over the group (the
// nccl backend takes device tensors and orders itself after the compute
// stream).
#include <cmath>

#include "framework/communicator.h"
#include "framework/cuda/device_api.h"
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "framework/cuda/stored_math.h"
#include "framework/error.h"
#include "layers/multi_head_attention.h"
#include "layers/multi_head_attention_flash.h"
#include "layers/neuron_layer.h"  // check_same_storage

namespace strata {

// What forward keeps for backward (q, k, v head-major, the context) is the
// layer's kept() block, which the net's plan places by lifetime; what lives
// only inside one call (the projection, the probabilities, the heads'
// outputs, every gradient but the parameters' and the input's) is its
// scratch(), placed at that call's step (GpuScratch in the .h). Backward
// computes the probabilities again from q and k (head_probs below), the
// same calls on the same values as forward's, so the same bits. Both are
// carved by the layouts multi_head_attention.cpp shares with scratch_bytes()
// and kept_bytes(), so the plan counts exactly what runs.
//
// With 16-bit blobs (the call dtype bf16 or f16) attention itself runs in
// the fused kernels (multi_head_attention_flash.h) unless the layer says
// `fused: false` or the GPU cannot; else, and for the projections, every
// product runs on tensor cores: 16-bit operands, f32 sums, each result rounded once as it is
// stored (forward_stored_cuda / backward_stored_cuda below; the rounding
// points are listed in the .h, and the CPU rounds at the same ones). The
// scores and their gradient are f32 tensors: the softmax and its backward
// compute in f32, and P and dS are rounded once for the products after them.

namespace {

enum class Direction { kToHeads, kFromHeads };

// rows [N, T, S, H, dh] <-> heads [S, N, H, T, dh]; one thread per value,
// indexed in the row layout. E: any type of the values' size (they are moved, not read).
template <class E>
__global__ void permute_heads(int64_t total, int64_t n, int64_t t, int64_t s, int64_t h, int64_t dh, int to_heads,
                              const E* src, E* dst) {
  STRATA_CUDA_LOOP(i, total) {
    const int64_t e = i % dh;
    const int64_t hh = (i / dh) % h;
    const int64_t ss = (i / (dh * h)) % s;
    const int64_t tt = (i / (dh * h * s)) % t;
    const int64_t nn = i / (dh * h * s * t);
    const int64_t j = (((ss * n + nn) * h + hh) * t + tt) * dh + e;
    if (to_heads) {
      dst[j] = src[i];
    } else {
      dst[i] = src[j];
    }
  }
}

// Values of `dtype` (f32, bf16 or f16) from one layout to the other.
void permute(Direction dir, int64_t n, int64_t t, int64_t s, int64_t h, int64_t dh, const void* src, void* dst,
             DType dtype = DType::kF32) {
  const int64_t total = n * t * s * h * dh;
  if (total == 0) return;
  const int to_heads = dir == Direction::kToHeads ? 1 : 0;
  const auto launch = [&](auto e) {
    using E = decltype(e);
    permute_heads<E><<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        total, n, t, s, h, dh, to_heads, static_cast<const E*>(src), static_cast<E*>(dst));
  };
  switch (dtype_size(dtype)) {
    case 4: launch(float{}); break;
    case 2: launch(uint16_t{}); break;
    default: fail<Error>("MultiHeadAttention: values of ", dtype_name(dtype), " (f32, bf16 and f16 only)");
  }
  STRATA_KERNEL_CHECK();
}

// probs [items, T, T] = softmax(scale q k^T) per (sample, head).
void head_probs(int64_t items, int64_t t, int64_t dh, float scale, const float* q, const float* k, float* probs) {
  const int64_t tt = t * t, td = t * dh;
  cuda::gemm_strided_batched(Transpose::kNo, Transpose::kYes, t, t, dh, scale, q, td, k, td, 0.0f, probs, tt, items);
  cuda::softmax_channels(items * t, t, 1, probs, probs, nullptr, nullptr);
}

// The element `e` of t (any dtype), as an address.
char* at(const Tensor& t, int64_t e) {
  return static_cast<char*>(const_cast<void*>(t.raw_data())) + e * static_cast<int64_t>(dtype_size(t.dtype()));
}

// probs [items, T, T] = softmax(scale q k^T) per (sample, head) in f32, from
// q and k head-major in `st`, and P rounded to `st` into probs_stored: the
// same calls in forward and backward, so the same bits.
void head_probs_stored(int64_t items, int64_t t, int64_t dh, float scale, const void* q, const void* k, DType st,
                       float* probs, void* probs_stored) {
  const int64_t tt = t * t, td = t * dh;
  cuda::gemm_stored_strided_batched(Transpose::kNo, Transpose::kYes, t, t, dh, scale, q, td, k, td, st, 0.0f, probs,
                                    tt, DType::kF32, items);
  cuda::softmax_channels(items * t, t, 1, probs, probs, nullptr, nullptr);
  if (items * tt > 0) cuda::cast_elements(probs_stored, st, probs, DType::kF32, items * tt, cuda::current_device());
}

}  // namespace

void MultiHeadAttentionLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  const Tensor& xt = bottom[0]->data;
  Tensor& yt = top[0]->data;
  check_same_storage("MultiHeadAttention forward", {&xt, &yt});
  if (xt.dtype() != DType::kF32) return forward_stored_cuda(xt, yt);
  const int64_t m = n_ * t_, T = t_, dh = dh_, lh = local_heads();
  const int64_t dl = lh * dh, width = 3 * dl, items = n_ * lh;
  Kept kept = take_kept();
  GpuScratch sc = take_gpu_scratch(false);
  const float* x = xt.device_data<float>();
  float* probs = sc.probs.device_data<float>();
  float* ctx = kept.ctx.device_data<float>();
  // head-major [3, N, heads, T, dh]
  float* q = kept.qkv.device_data<float>();
  float* k = q + m * dl;
  float* v = k + m * dl;
  float* qkv = sc.qkv.device_data<float>();  // rows [N, T, 3 * dl]
  float* o = sc.o.device_data<float>();

  cuda::gemm(Transpose::kNo, Transpose::kYes, m, width, d_, 1.0f, x, param(in_w_).data.device_data<float>(), 0.0f, qkv);
  if (in_b_ >= 0) cuda::add_row_bias(m, width, param(in_b_).data.device_data<float>(), qkv);
  permute(Direction::kToHeads, n_, T, 3, lh, dh, qkv, q);

  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  const int64_t tt = T * T, td = T * dh;
  head_probs(items, T, dh, scale, q, k, probs);
  cuda::gemm_strided_batched(Transpose::kNo, Transpose::kNo, T, dh, T, 1.0f, probs, tt, v, td, 0.0f, o, td, items);
  permute(Direction::kFromHeads, n_, T, 1, lh, dh, o, ctx);

  float* y = yt.device_data<float>();
  cuda::gemm(Transpose::kNo, Transpose::kYes, m, d_, dl, 1.0f, ctx, param(out_w_).data.device_data<float>(), 0.0f, y);
  if (tp_.active()) tp_.comm->allreduce(yt, ReduceOp::kSum);  // every rank's heads
  if (out_b_ >= 0) cuda::add_row_bias(m, d_, param(out_b_).data.device_data<float>(), y);
}

// The same on 16-bit blobs (never tensor parallel: takes_storage), every
// product on 16-bit operands with f32 sums. A bias is laid into the rows
// first, so that the GEMM adds to it (beta 1) and rounds once.
void MultiHeadAttentionLayer::forward_stored_cuda(const Tensor& xt, Tensor& yt) {
  const int64_t m = n_ * t_, T = t_, dh = dh_, lh = local_heads();
  const int64_t dl = lh * dh, width = 3 * dl, items = n_ * lh;
  const int64_t tt = T * T, td = T * dh;
  const DType st = xt.dtype();
  Kept kept = take_kept();
  GpuScratch sc = take_gpu_scratch(false);
  cast_into(kept.w_in, param(in_w_).data);  // kept for backward's input gradients
  cast_into(kept.w_out, param(out_w_).data);

  cuda::linear_stored(Transpose::kYes, m, width, d_, xt.raw_data(), kept.w_in.raw_data(), st,
                      in_b_ >= 0 ? param(in_b_).data.device_data<float>() : nullptr, sc.qkv.raw_data());
  permute(Direction::kToHeads, n_, T, 3, lh, dh, sc.qkv.raw_data(), kept.qkv.raw_data(), st);
  const char* q = at(kept.qkv, 0);
  const char* k = at(kept.qkv, m * dl);
  const char* v = at(kept.qkv, 2 * m * dl);

  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  if (fused()) {
    flash_attention::forward(items, T, dh, scale, q, k, v, st, sc.o.raw_data(), kept.lse.device_data<float>());
  } else {
    head_probs_stored(items, T, dh, scale, q, k, st, sc.probs.device_data<float>(), sc.probs_stored.raw_data());
    cuda::gemm_stored_strided_batched(Transpose::kNo, Transpose::kNo, T, dh, T, 1.0f, sc.probs_stored.raw_data(), tt,
                                      v, td, st, 0.0f, sc.o.raw_data(), td, st, items);
  }
  permute(Direction::kFromHeads, n_, T, 1, lh, dh, sc.o.raw_data(), kept.ctx.raw_data(), st);

  cuda::linear_stored(Transpose::kYes, m, d_, dl, kept.ctx.raw_data(), kept.w_out.raw_data(), st,
                      out_b_ >= 0 ? param(out_b_).data.device_data<float>() : nullptr, yt.raw_data());
}

// Per (sample, head), batched, with dO the head's slice of d ctx and P
// recomputed from the kept q and k:
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(dP * P)),
//   dQ = scale * dS K,  dK = scale * dS^T Q
// (`scale` rides on the GEMMs' alpha, as on the CPU).
void MultiHeadAttentionLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                            const BlobVec& bottom) {
  const Tensor& dyt = top[0]->diff;
  const Tensor& xt = bottom[0]->data;
  check_same_storage("MultiHeadAttention backward", {&dyt, &xt});
  Tensor* dxt = propagate_down[0] ? &bottom[0]->diff : nullptr;
  if (dxt) check_same_storage("MultiHeadAttention backward", {&dyt, dxt});
  if (dyt.dtype() != DType::kF32) return backward_stored_cuda(dyt, xt, dxt);
  const int64_t m = n_ * t_, T = t_, dh = dh_, lh = local_heads();
  const int64_t dl = lh * dh, width = 3 * dl, items = n_ * lh;
  const Kept kept = take_kept();  // as forward left it
  GpuScratch sc = take_gpu_scratch(true);
  const float* dy = dyt.device_data<float>();
  const float* x = xt.device_data<float>();
  float* probs = sc.probs.device_data<float>();
  const float* ctx = kept.ctx.device_data<float>();
  const float* q = kept.qkv.device_data<float>();
  const float* k = q + m * dl;
  const float* v = k + m * dl;
  float* dctx = sc.dctx.device_data<float>();
  float* dout = sc.dout.device_data<float>();
  float* dp = sc.dp.device_data<float>();
  float* dq = sc.dheads.device_data<float>();  // dQ, dK, dV one after another, as permute reads them
  float* dk = dq + m * dl;
  float* dv = dk + m * dl;
  float* dqkv = sc.dqkv.device_data<float>();

  // Output projection.
  cuda::gemm(Transpose::kYes, Transpose::kNo, d_, dl, m, 1.0f, dy, ctx, 1.0f, param(out_w_).diff.device_data<float>());
  if (out_b_ >= 0) cuda::column_sums(m, d_, dy, 1.0f, param(out_b_).diff.device_data<float>());
  cuda::gemm(Transpose::kNo, Transpose::kNo, m, dl, d_, 1.0f, dy, param(out_w_).data.device_data<float>(), 0.0f, dctx);
  permute(Direction::kToHeads, n_, T, 1, lh, dh, dctx, dout);

  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  const int64_t tt = T * T, td = T * dh;
  head_probs(items, T, dh, scale, q, k, probs);
  cuda::gemm_strided_batched(Transpose::kYes, Transpose::kNo, T, dh, T, 1.0f, probs, tt, dout, td, 0.0f, dv, td,
                             items);
  cuda::gemm_strided_batched(Transpose::kNo, Transpose::kYes, T, T, dh, 1.0f, dout, td, v, td, 0.0f, dp, tt, items);
  cuda::softmax_channels_backward(items * T, T, 1, probs, dp, dp);
  cuda::gemm_strided_batched(Transpose::kNo, Transpose::kNo, T, dh, T, scale, dp, tt, k, td, 0.0f, dq, td, items);
  cuda::gemm_strided_batched(Transpose::kYes, Transpose::kNo, T, dh, T, scale, dp, tt, q, td, 0.0f, dk, td, items);
  permute(Direction::kFromHeads, n_, T, 3, lh, dh, dq, dqkv);

  // Input projection.
  cuda::gemm(Transpose::kYes, Transpose::kNo, width, d_, m, 1.0f, dqkv, x, 1.0f,
             param(in_w_).diff.device_data<float>());
  if (in_b_ >= 0) cuda::column_sums(m, width, dqkv, 1.0f, param(in_b_).diff.device_data<float>());
  if (dxt) {
    float* dx = dxt->device_data<float>();
    cuda::gemm(Transpose::kNo, Transpose::kNo, m, d_, width, 1.0f, dqkv, param(in_w_).data.device_data<float>(), 0.0f,
               dx);
    if (tp_.active()) tp_.comm->allreduce(*dxt, ReduceOp::kSum);  // every rank's heads
  }
}

// The same on 16-bit blobs: the weight gradients straight into their f32
// parameters (16-bit operands, f32 sums), every other product's result
// rounded once to the blobs' dtype; the input gradients against the
// weights' copies the forward rounded.
void MultiHeadAttentionLayer::backward_stored_cuda(const Tensor& dyt, const Tensor& xt, Tensor* dxt) {
  const int64_t m = n_ * t_, T = t_, dh = dh_, lh = local_heads();
  const int64_t dl = lh * dh, width = 3 * dl, items = n_ * lh;
  const int64_t tt = T * T, td = T * dh;
  const DType st = dyt.dtype();
  const Kept kept = take_kept();  // as forward left it
  GpuScratch sc = take_gpu_scratch(true);
  const char* q = at(kept.qkv, 0);
  const char* k = at(kept.qkv, m * dl);
  const char* v = at(kept.qkv, 2 * m * dl);
  char* dq = at(sc.dheads, 0);  // dQ, dK, dV one after another, as permute reads them
  char* dk = at(sc.dheads, m * dl);
  char* dv = at(sc.dheads, 2 * m * dl);

  // Output projection.
  cuda::linear_grads_stored(true, m, d_, dl, dyt.raw_data(), kept.ctx.raw_data(), st,
                            param(out_w_).diff.device_data<float>(),
                            out_b_ >= 0 ? param(out_b_).diff.device_data<float>() : nullptr);
  cuda::gemm_stored(Transpose::kNo, Transpose::kNo, m, dl, d_, 1.0f, dyt.raw_data(), kept.w_out.raw_data(), st, 0.0f,
                    sc.dctx.raw_data(), st);
  permute(Direction::kToHeads, n_, T, 1, lh, dh, sc.dctx.raw_data(), sc.dout.raw_data(), st);

  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  if (fused()) {
    float* dots = sc.row_dots.device_data<float>();
    flash_attention::row_dots(n_, T, lh, dh, kept.ctx.raw_data(), sc.dout.raw_data(), st, dots);
    flash_attention::backward(items, T, dh, scale, q, k, v, sc.dout.raw_data(), kept.lse.device_data<float>(), dots,
                              st, dq, dk, dv);
  } else {
    float* probs = sc.probs.device_data<float>();
    float* dp = sc.dp.device_data<float>();
    void* p_stored = sc.probs_stored.raw_data();
    head_probs_stored(items, T, dh, scale, q, k, st, probs, p_stored);
    cuda::gemm_stored_strided_batched(Transpose::kYes, Transpose::kNo, T, dh, T, 1.0f, p_stored, tt,
                                      sc.dout.raw_data(), td, st, 0.0f, dv, td, st, items);
    cuda::gemm_stored_strided_batched(Transpose::kNo, Transpose::kYes, T, T, dh, 1.0f, sc.dout.raw_data(), td, v, td,
                                      st, 0.0f, dp, tt, DType::kF32, items);
    cuda::softmax_channels_backward(items * T, T, 1, probs, dp, dp);  // dS, from the f32 P
    if (items * tt > 0) cuda::cast_elements(p_stored, st, dp, DType::kF32, items * tt, cuda::current_device());
    cuda::gemm_stored_strided_batched(Transpose::kNo, Transpose::kNo, T, dh, T, scale, p_stored, tt, k, td, st, 0.0f,
                                      dq, td, st, items);
    cuda::gemm_stored_strided_batched(Transpose::kYes, Transpose::kNo, T, dh, T, scale, p_stored, tt, q, td, st, 0.0f,
                                      dk, td, st, items);
  }
  permute(Direction::kFromHeads, n_, T, 3, lh, dh, sc.dheads.raw_data(), sc.dqkv.raw_data(), st);

  // Input projection.
  cuda::linear_grads_stored(true, m, width, d_, sc.dqkv.raw_data(), xt.raw_data(), st,
                            param(in_w_).diff.device_data<float>(),
                            in_b_ >= 0 ? param(in_b_).diff.device_data<float>() : nullptr);
  if (dxt) {
    cuda::gemm_stored(Transpose::kNo, Transpose::kNo, m, d_, width, 1.0f, sc.dqkv.raw_data(), kept.w_in.raw_data(), st,
                      0.0f, dxt->raw_data(), st);
  }
}

}  // namespace strata
