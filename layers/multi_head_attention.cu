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
#include "framework/error.h"
#include "layers/multi_head_attention.h"
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
// With 16-bit blobs (the call dtype bf16 or f16) the kept q, k, v and
// context are stored in that dtype, and each call widens the 16-bit tensors
// it reads into f32 copies in its scratch, runs the f32 code below on them,
// and rounds what it writes once: q, k and v after the projection and its
// bias, the context after the weighted sum of V (and reads both back
// rounded, as the CPU does), y and dx at the end.

namespace {

enum class Direction { kToHeads, kFromHeads };

// rows [N, T, S, H, dh] <-> heads [S, N, H, T, dh]; one thread per value,
// indexed in the row layout.
__global__ void permute_heads(int64_t total, int64_t n, int64_t t, int64_t s, int64_t h, int64_t dh, int to_heads,
                              const float* src, float* dst) {
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

void permute(Direction dir, int64_t n, int64_t t, int64_t s, int64_t h, int64_t dh, const float* src, float* dst) {
  const int64_t total = n * t * s * h * dh;
  if (total == 0) return;
  permute_heads<<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      total, n, t, s, h, dh, dir == Direction::kToHeads ? 1 : 0, src, dst);
  STRATA_KERNEL_CHECK();
}

// probs [items, T, T] = softmax(scale q k^T) per (sample, head).
void head_probs(int64_t items, int64_t t, int64_t dh, float scale, const float* q, const float* k, float* probs) {
  const int64_t tt = t * t, td = t * dh;
  cuda::gemm_strided_batched(Transpose::kNo, Transpose::kYes, t, t, dh, scale, q, td, k, td, 0.0f, probs, tt, items);
  cuda::softmax_channels(items * t, t, 1, probs, probs, nullptr, nullptr);
}

// n elements from `src` to `dst`, converted (rounded to the nearest even when narrowing).
void convert(const void* src, DType from, void* dst, DType to, int64_t n, const Device& dev) {
  if (n > 0) cuda::cast_elements(dst, to, src, from, n, dev.index);
}

// The f32 values at `wide` rounded to `dtype` into `stored`, and `wide` set
// to what was stored, so that later reads see the rounded values.
void round_through(float* wide, void* stored, DType dtype, int64_t n, const Device& dev) {
  convert(wide, DType::kF32, stored, dtype, n, dev);
  convert(stored, dtype, wide, DType::kF32, n, dev);
}

}  // namespace

void MultiHeadAttentionLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  const int64_t m = n_ * t_, T = t_, dh = dh_, lh = local_heads();
  const int64_t dl = lh * dh, width = 3 * dl, items = n_ * lh;
  const Tensor& xt = bottom[0]->data;
  Tensor& yt = top[0]->data;
  check_same_storage("MultiHeadAttention forward", {&xt, &yt});
  const DType dtype = xt.dtype();
  const bool wide = dtype != DType::kF32;
  const Device dev = device();
  Kept kept = take_kept();
  GpuScratch sc = take_gpu_scratch(false);
  if (wide) convert(xt.raw_data(), dtype, sc.wide_x.raw_data(), DType::kF32, m * d_, dev);
  const float* x = wide ? sc.wide_x.device_data<float>() : xt.device_data<float>();
  float* probs = sc.probs.device_data<float>();
  float* ctx = wide ? sc.wide_ctx.device_data<float>() : kept.ctx.device_data<float>();
  // head-major [3, N, heads, T, dh]
  float* q = wide ? sc.wide_heads.device_data<float>() : kept.qkv.device_data<float>();
  float* k = q + m * dl;
  float* v = k + m * dl;
  float* qkv = sc.qkv.device_data<float>();  // rows [N, T, 3 * dl]
  float* o = sc.o.device_data<float>();

  cuda::gemm(Transpose::kNo, Transpose::kYes, m, width, d_, 1.0f, x, param(in_w_).data.device_data<float>(), 0.0f, qkv);
  if (in_b_ >= 0) cuda::add_row_bias(m, width, param(in_b_).data.device_data<float>(), qkv);
  permute(Direction::kToHeads, n_, T, 3, lh, dh, qkv, q);
  if (wide) round_through(q, kept.qkv.raw_data(), dtype, 3 * m * dl, dev);

  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  const int64_t tt = T * T, td = T * dh;
  head_probs(items, T, dh, scale, q, k, probs);
  cuda::gemm_strided_batched(Transpose::kNo, Transpose::kNo, T, dh, T, 1.0f, probs, tt, v, td, 0.0f, o, td, items);
  permute(Direction::kFromHeads, n_, T, 1, lh, dh, o, ctx);
  if (wide) round_through(ctx, kept.ctx.raw_data(), dtype, m * dl, dev);

  float* y = wide ? sc.wide_y.device_data<float>() : yt.device_data<float>();
  cuda::gemm(Transpose::kNo, Transpose::kYes, m, d_, dl, 1.0f, ctx, param(out_w_).data.device_data<float>(), 0.0f, y);
  if (tp_.active()) tp_.comm->allreduce(yt, ReduceOp::kSum);  // every rank's heads (f32 only: takes_storage)
  if (out_b_ >= 0) cuda::add_row_bias(m, d_, param(out_b_).data.device_data<float>(), y);
  if (wide) convert(y, DType::kF32, yt.raw_data(), dtype, m * d_, dev);
}

// Per (sample, head), batched, with dO the head's slice of d ctx and P
// recomputed from the kept q and k:
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(dP * P)),
//   dQ = scale * dS K,  dK = scale * dS^T Q
// (the CPU folds `scale` into dS; here it rides on the GEMMs' alpha).
void MultiHeadAttentionLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                            const BlobVec& bottom) {
  const int64_t m = n_ * t_, T = t_, dh = dh_, lh = local_heads();
  const int64_t dl = lh * dh, width = 3 * dl, items = n_ * lh;
  const Tensor& dyt = top[0]->diff;
  const Tensor& xt = bottom[0]->data;
  check_same_storage("MultiHeadAttention backward", {&dyt, &xt});
  const DType dtype = dyt.dtype();
  const bool wide = dtype != DType::kF32;
  const Device dev = device();
  const Kept kept = take_kept();  // as forward left it
  GpuScratch sc = take_gpu_scratch(true);
  if (wide) {
    convert(dyt.raw_data(), dtype, sc.wide_dy.raw_data(), DType::kF32, m * d_, dev);
    convert(xt.raw_data(), dtype, sc.wide_x.raw_data(), DType::kF32, m * d_, dev);
    convert(kept.ctx.raw_data(), dtype, sc.wide_ctx.raw_data(), DType::kF32, m * dl, dev);
    convert(kept.qkv.raw_data(), dtype, sc.wide_heads.raw_data(), DType::kF32, 3 * m * dl, dev);
  }
  const float* dy = wide ? sc.wide_dy.device_data<float>() : dyt.device_data<float>();
  const float* x = wide ? sc.wide_x.device_data<float>() : xt.device_data<float>();
  float* probs = sc.probs.device_data<float>();
  const float* ctx = wide ? sc.wide_ctx.device_data<float>() : kept.ctx.device_data<float>();
  const float* q = wide ? sc.wide_heads.device_data<float>() : kept.qkv.device_data<float>();
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
  if (propagate_down[0]) {
    Tensor& dxt = bottom[0]->diff;
    check_same_storage("MultiHeadAttention backward", {&dyt, &dxt});
    float* dx = wide ? sc.wide_dx.device_data<float>() : dxt.device_data<float>();
    cuda::gemm(Transpose::kNo, Transpose::kNo, m, d_, width, 1.0f, dqkv, param(in_w_).data.device_data<float>(), 0.0f,
               dx);
    if (tp_.active()) tp_.comm->allreduce(dxt, ReduceOp::kSum);  // every rank's heads (f32 only)
    if (wide) convert(dx, DType::kF32, dxt.raw_data(), dtype, m * d_, dev);
  }
}

}  // namespace strata
