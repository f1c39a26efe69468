// Internal to framework/math.cpp: the hand-written AVX-512 SGEMM behind
// gemm() and gemm_pack_b() (see math.h for their contracts).
//
// On x86-64 CPUs with AVX-512 we use our own blocked kernel instead of
// OpenBLAS. The OpenBLAS build the project links (0.3.21) picks its AVX2
// (Haswell) kernels on CPUs it does not know, e.g. AMD Zen 5, which leaves
// half of the FMA throughput unused (~120 vs ~280 GFLOPS per core there); the
// micro-kernel runs at ~95% of peak from L1 and ~90% inside layers. It also
// runs single-threaded when called from inside an OpenMP parallel region, so
// layers can parallelise over images and call gemm() per thread.
// Other CPUs use cblas_sgemm.
#pragma once

#include <cstdint>

#include "framework/math.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define STRATA_GEMM_AVX512 1
#endif

namespace strata {
namespace gemm_internal {

// Whether this build has the kernel and this CPU runs it (AVX-512 F/DQ/BW/VL).
bool cpu_has_avx512();

// C[M,N] (row stride ldc) = alpha * op(A) * op(B) + beta * C; beta == 0 never
// reads C. Threads split C into column (or row) stripes; inside an OpenMP
// parallel region it runs on the calling thread alone. With `packer` (see
// gemm_pack_b), op(B) comes from it and B is unused. Requires M, N, K > 0 and
// cpu_has_avx512().
void gemm_avx512(Transpose ta, Transpose tb, int64_t M, int64_t N, int64_t K, float alpha,
                 const float* A, const float* B, const GemmPackB* packer, float beta, float* C,
                 int64_t ldc);

}  // namespace gemm_internal
}  // namespace strata
