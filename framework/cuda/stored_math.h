// Math over tensors stored in bf16 or f16 (the Net's storage dtype,
// framework/net_storage.cpp) beside framework/cuda/math.h's f32 forms: what a
// layer that takes its storage dtype (Layer::takes_storage) uses on a GPU.
// Every sum is accumulated in f32 (or double, as the f32 forms), every
// 16-bit result rounded once to the nearest even. On the compute stream;
// Error for a dtype other than f32, bf16 and f16.
#pragma once

#include <cstdint>

#include "framework/cuda/math.h"  // Transpose
#include "framework/dtype.h"

namespace strata::cuda {

// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, row-major. A and B
// stored in `ab`, C in `c` (`ab` or f32: a 16-bit weight gradient lands in
// its f32 parameter). 16-bit operands run on tensor cores with f32
// accumulation (one rounding of C); f32 ones as cuda::gemm, in the current
// math mode. Nothing when M or N is 0; with K == 0, C is scaled by beta
// (for a 16-bit C only beta 0 or 1).
void gemm_stored(Transpose ta, Transpose tb, int64_t M, int64_t N, int64_t K, float alpha, const void* A,
                 const void* B, DType ab, float beta, void* C, DType c);

// The same over `batch` independent products, the i-th at A + i * stride_a,
// B + i * stride_b and C + i * stride_c (strides in elements, 0 to share
// an operand): attention's per-(sample, head) products.
void gemm_stored_strided_batched(Transpose ta, Transpose tb, int64_t M, int64_t N, int64_t K, float alpha,
                                 const void* A, int64_t stride_a, const void* B, int64_t stride_b, DType ab,
                                 float beta, void* C, int64_t stride_c, DType c, int64_t batch);

// Y[M,N] = X[M,K] op(W) + bias, rounded once into Y: a layer's output with
// its bias (f32, one per column of Y, not rounded first, as the CPU adds it)
// applied in the GEMM's epilogue (cuBLASLt), so Y is written once and never
// read back. X, W and Y in `st` (bf16 or f16), f32 sums. False when
// cuBLASLt offers no algorithm for it (or M, N or K is 0): nothing was
// written, and the caller adds the bias another way.
bool gemm_stored_bias(Transpose tw, int64_t M, int64_t N, int64_t K, const void* X, const void* W, DType st,
                      const float* bias, void* Y);

// A linear layer's forward on 16-bit blobs: Y[M,N] = X[M,K] op(W) (+ bias,
// f32, when given), rounded once: gemm_stored_bias where cuBLASLt takes it,
// else the bias laid into the rows (fill_rows) and gemm_stored with beta 1.
void linear_stored(Transpose tw, int64_t M, int64_t N, int64_t K, const void* X, const void* W, DType st,
                   const float* bias, void* Y);

// A linear layer's parameter gradients on 16-bit blobs, accumulated into
// their f32 parameters: dW += dY^T X ([N, K], `output_major`) or X^T dY
// ([K, N]) for dY [M, N] and X [M, K] in `st`, and, when db is given,
// db += the column sums of dY. Where cuBLASLt takes it the column sums come
// from the weight-gradient GEMM's epilogue (BGRADB / BGRADA), so dY is read
// once; else from column_sums_stored. Returns whether the epilogue did it.
bool linear_grads_stored(bool output_major, int64_t M, int64_t N, int64_t K, const void* dY, const void* X,
                         DType st, float* dW, float* db);

// y[r][c] = b[c] for y [rows, cols] stored in `dtype` (b f32, rounded): a
// bias laid into every row before a GEMM adds to it with beta 1, so that the
// sum is rounded once.
void fill_rows(int64_t rows, int64_t cols, const float* b, void* y, DType dtype);

// y[c] = sum_r A[r][c] + beta * y[c] (beta 0 overwrites, 1 accumulates), A
// [rows, cols] stored in `dtype`, y f32. Deterministic.
void column_sums_stored(int64_t rows, int64_t cols, const void* A, DType dtype, float beta, float* y);

// Per-channel sums of x [outer, channels, inner] stored in `dtype`, into f32
// y[c] = sum_{o,i} x[o][c][i] * w[o][c][i] + beta * y[c] (w of x's shape and
// dtype, or nullptr for 1), in double. Deterministic.
void channel_sums_stored(int64_t outer, int64_t channels, int64_t inner, const void* x, const void* w, DType dtype,
                         float beta, float* y);

// Per-channel sums over the rows of x [rows, channels] (channels-last images
// as [N * H * W, C]) stored in `dtype`, into f32
//   y[c] = (sum_r term(x[r][c])) / divisor + beta * y[c],
// term x, x * w[r][c] (w of x's shape and dtype) or (x - center[c])^2 (center
// f32 [channels]), summed in double. A warp reads 32 adjacent channels
// (coalesced, where one block per channel would read one element in every
// `channels`), and the rows are spread over up to 128 blocks per 32 channels
// whose partial sums, in `partial` (row_sums_partials(rows, channels) doubles
// on the device; the caller's scratch), are added in order: deterministic.
enum class RowTerm { kValue, kProduct, kCenteredSquare };
int64_t row_sums_partials(int64_t rows, int64_t channels);
void channel_row_sums(int64_t rows, int64_t channels, const void* x, const void* w, const float* center, DType dtype,
                      RowTerm term, double divisor, float beta, float* y, double* partial);

// y[o][c][i] = round(act(y[o][c][i] + b[c])), y [outer, channels, inner]
// stored in `dtype` (f32 too), b f32: a convolution's bias (and a fused ReLU).
void add_channel_bias_stored(int64_t outer, int64_t channels, int64_t inner, const float* b, void* y, DType dtype,
                             Activation act = {});

// Softmax over the channels of x [outer, channels, inner] (y may be x) and
// its backward dx = y * (dy - sum_c dy * y), on blobs stored in `dtype`
// (f32, bf16, f16): widened, computed as softmax_channels does in f32, each
// output rounded once (framework/cuda/math.cu).
void softmax_channels_stored(int64_t outer, int64_t channels, int64_t inner, const void* x, void* y, DType dtype);
void softmax_channels_backward_stored(int64_t outer, int64_t channels, int64_t inner, const void* y, const void* dy,
                                      void* dx, DType dtype);

// dst[i] += src[i] for i < n, src stored in `dtype` (widened), dst f32: a
// 16-bit gradient (cuDNN's weight gradient of 16-bit data) accumulated into
// its f32 parameter's.
void accumulate_widened(int64_t n, const void* src, DType dtype, float* dst);

}  // namespace strata::cuda
