// GEMM on bf16 operands with f32 accumulation, for the CPU's bf16 paths on
// CPUs with AMX (Intel Sapphire Rapids and later): the tile registers'
// TDPBF16PS multiplies bf16 pairs exactly and sums them in f32, about three
// times this CPU kind's f32 FMA rate on one core (docs/benchmarks.md).
// AVX-512 BF16 alone (vdpbf16ps) has the FMA's rate and is not used.
// Operands stored in bf16 are used as they are; operands stored in f32 (a
// layer's weights) are rounded to bf16 (to the nearest even) as they are
// packed, as autocast rounds a weight for a bf16 matmul. C and the sums are
// f32. Blocks of 32 x 32 of C, 2 x 2 tiles; operands packed in AMX's
// layouts (A rows of k pairs, B k pairs by columns) by AVX-512 code.
#pragma once

#include <cstdint>

#include "framework/cpu/math.h"  // Transpose
#include "framework/dtype.h"

namespace strata {

// Whether gemm_bf16 runs here: this build has the kernel, the CPU has AMX
// BF16 (and AVX-512 BF16 for the packers), Linux let the process use the
// tile registers, and the CPU kernels' path is AVX-512 (STRATA_CPU_ISA, or a
// test forcing another path, turns it off with the rest of AVX-512).
bool gemm_bf16_available();

// C[M, N] (row stride ldc) = alpha * op(A) * op(B) + beta * C, op(A) [M, K]
// and op(B) [K, N], each stored densely as `a_dtype` / `b_dtype` (kBF16 or
// kF32) with the leading dimensions gemm() uses (A: K, or M transposed; B:
// N, or K transposed). beta == 0 never reads C. Threads split C as gemm()
// does; inside a parallel region it runs on the calling thread. Requires
// gemm_bf16_available() and M, N, K > 0.
void gemm_bf16(Transpose ta, Transpose tb, int64_t M, int64_t N, int64_t K, float alpha, const void* A,
               DType a_dtype, const void* B, DType b_dtype, float beta, float* C, int64_t ldc);

}  // namespace strata
