// CPU numerical kernels shared by layers and solvers: GEMM (our own AVX-512
// or AVX2 kernel where the CPU has it, OpenBLAS otherwise) and the few
// vector operations every layer needs.
#pragma once

#include <cstdint>
#include <functional>

namespace strata {

enum class Transpose { kNo, kYes };

// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, row-major.
void gemm(Transpose ta, Transpose tb, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, const float* B, float beta, float* C);

// The path gemm() and gemm_pack_b() take is framework/cpu/cpu_isa.h's: our
// AVX-512 or AVX2 kernel, or OpenBLAS (portable). On every path a call inside
// a parallel region runs on the calling thread alone.

// GEMM whose B operand the caller packs itself, for operands never stored as
// a matrix (a convolution's image patches, gathered straight from the image
// instead of through an im2col buffer). The GEMM asks for blocks of B:
// pack_b(k0, kc, j0, nc, dst) must write op(B)[k0 + k][j0 + j] (k < kc,
// j < nc) to dst[(j / kGemmPanel) * kc * kGemmPanel + k * kGemmPanel + j % kGemmPanel]
// and zeros in the rest of the last panel; dst is 64-byte aligned. Calls may
// come from several threads at once (different blocks).
// C[M,N] (row stride ldc) = alpha * op(A)[M,K] * B[K,N] + beta * C.
constexpr int64_t kGemmPanel = 32;
using GemmPackB = std::function<void(int64_t k0, int64_t kc, int64_t j0, int64_t nc, float* dst)>;
void gemm_pack_b(Transpose ta, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                 const GemmPackB& pack_b, float beta, float* C, int64_t ldc);
// y[M] = alpha * op(A) * x + beta * y, A row-major [M,N] (or [N,M] transposed).
void gemv(Transpose ta, int64_t M, int64_t N, float alpha, const float* A, const float* x,
          float beta, float* y);
void axpy(int64_t n, float alpha, const float* x, float* y);  // y += alpha * x
void scale(int64_t n, float alpha, float* x);                 // x *= alpha
double dot(int64_t n, const float* x, const float* y);        // accumulated in double
double sum_squares(int64_t n, const float* x);

// im2col / col2im for 2-D convolution with padding, stride and dilation.
// col has shape [channels * kh * kw, out_h * out_w].
void im2col(const float* im, int64_t channels, int64_t height, int64_t width, int64_t kh, int64_t kw,
            int64_t pad_h, int64_t pad_w, int64_t stride_h, int64_t stride_w, int64_t dil_h,
            int64_t dil_w, float* col);
// Accumulates col back into im (im must be zeroed by the caller when needed).
void col2im(const float* col, int64_t channels, int64_t height, int64_t width, int64_t kh, int64_t kw,
            int64_t pad_h, int64_t pad_w, int64_t stride_h, int64_t stride_w, int64_t dil_h,
            int64_t dil_w, float* im);

// The same with the rows of col `col_ld` floats apart (col_ld >= out_h * out_w),
// so that several images share one column buffer [channels * kh * kw, n * out_h * out_w]
// (image i at column offset i * out_h * out_w) and one GEMM covers them all.
void im2col(const float* im, int64_t channels, int64_t height, int64_t width, int64_t kh, int64_t kw,
            int64_t pad_h, int64_t pad_w, int64_t stride_h, int64_t stride_w, int64_t dil_h,
            int64_t dil_w, float* col, int64_t col_ld);
void col2im(const float* col, int64_t col_ld, int64_t channels, int64_t height, int64_t width,
            int64_t kh, int64_t kw, int64_t pad_h, int64_t pad_w, int64_t stride_h, int64_t stride_w,
            int64_t dil_h, int64_t dil_w, float* im);

}  // namespace strata
