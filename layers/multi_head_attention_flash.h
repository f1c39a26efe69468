// MultiHeadAttention's fused attention on a GPU (multi_head_attention_flash.cu),
// for 16-bit blobs: the per-(sample, head) products and the softmax between
// them in one kernel that walks the keys block by block with a running
// maximum and sum (FlashAttention's online softmax), so the [T, T] scores and
// probabilities never reach memory. Backward computes them again, block by
// block, from q, k and the row's log-sum-exp that forward keeps: one kernel
// for dK and dV (a block of keys against every query), one for dQ (a block of
// queries against every key), so that no sum needs atomics and the results
// do not depend on scheduling.
//
// Numerics, as the unfused path's (multi_head_attention.cu) up to the order
// of the sums: 16-bit operands on tensor cores with f32 sums, the scores and
// the softmax in f32, the probabilities rounded to the 16-bit dtype for P V
// (here before the division by the row's sum, which is applied to the f32
// output), dS from the f32 P rounded once for dQ and dK. One difference:
// backward's rowsum(dP * P) is taken as rowsum(dO * O), O the stored
// (rounded) output, as FlashAttention does.
//
// Every tensor is head-major, one dense [T, dh] block per item (sample, head);
// lse and the row dots are [items, T] f32.
#pragma once

#include <cstdint>
#include <string>

#include "framework/dtype.h"

namespace strata::flash_attention {

// The largest head dimension the kernels take (the tiles live in shared memory).
constexpr int64_t kMaxHeadDim = 128;

// "" when device `index` runs the fused kernels on heads of `head_dim`
// values; else why not (no GPU, compute capability below 8.0, a head too
// wide, not enough shared memory per block). Never throws.
std::string unavailable(int64_t head_dim, int index);

// o = softmax(scale q k^T) v per item, rounded once to `st` (bf16 or f16),
// and lse[item][i] = max_j s_ij + log sum_j exp(s_ij - max_j s_ij), s = scale q k^T.
void forward(int64_t items, int64_t t, int64_t head_dim, float scale, const void* q, const void* k, const void* v,
             DType st, void* o, float* lse);

// dots[n * heads + h][i] = sum_d o[n][i][h][d] * dout[n * heads + h][i][d]: o in
// rows [N, T, heads, dh] (the context as the layer keeps it), dout head-major.
void row_dots(int64_t n, int64_t t, int64_t heads, int64_t head_dim, const void* o, const void* dout, DType st,
              float* dots);

// dq, dk, dv (head-major, rounded once to `st`) from forward's q, k, v and
// lse, the output's gradient dout (head-major) and row_dots' dots.
void backward(int64_t items, int64_t t, int64_t head_dim, float scale, const void* q, const void* k, const void* v,
              const void* dout, const float* lse, const float* dots, DType st, void* dq, void* dk, void* dv);

}  // namespace strata::flash_attention
