// Internal to framework/cpu/math.cpp: the hand-written AVX-512 SGEMM behind
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

#include "framework/cpu/math.h"

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

#ifdef STRATA_GEMM_AVX512
#include <immintrin.h>

namespace strata {
namespace gemm_internal {

// Every function that uses AVX-512 carries this attribute (rather than a
// #pragma GCC target region, under which standard-library templates
// instantiated here would be compiled for AVX-512 and could be picked by the
// linker for callers on CPUs without it). Callers check cpu_has_avx512().
#define STRATA_AVX512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")))

// GCC 12 warns inside its own AVX-512 intrinsics (their deliberately
// undefined pass-through operand).
#pragma GCC diagnostic push
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

// In-register transpose of 16 rows of 16 floats: r[j] becomes column j. Used
// by the GEMM's packers and by the Convolution layer's patch packers
// (layers/convolution/convolution_patches.cpp).
STRATA_AVX512 __attribute__((always_inline)) inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 4; ++g) {  // rows 4g..4g+3: s[4g + c] holds column 4L + c in lane L
    const __m512d a0 = _mm512_castps_pd(t[4 * g]);
    const __m512d a1 = _mm512_castps_pd(t[4 * g + 1]);
    const __m512d a2 = _mm512_castps_pd(t[4 * g + 2]);
    const __m512d a3 = _mm512_castps_pd(t[4 * g + 3]);
    r[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, a2));
    r[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, a2));
    r[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, a3));
    r[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, a3));
  }
  for (int c = 0; c < 4; ++c) {
    t[c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88);
    t[4 + c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xdd);
    t[8 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
    t[12 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xdd);
  }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xdd);
    r[4 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0xdd);
  }
}

#pragma GCC diagnostic pop

}  // namespace gemm_internal
}  // namespace strata
#endif  // STRATA_GEMM_AVX512
