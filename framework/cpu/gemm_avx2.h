// Internal to framework/cpu/math.cpp: the hand-written AVX2/FMA SGEMM behind
// gemm() and gemm_pack_b() (see math.h for their contracts) on x86-64 CPUs
// without AVX-512 (e.g. AMD Zen 2/3, Intel Haswell to Alder Lake). It is the
// AVX-512 kernel (gemm_avx512.h) at half the vector width: same packing,
// blocking and threading, so gemm_pack_b's packers (32-column panels) serve
// both, and like it it runs single-threaded inside a parallel region.
#pragma once

#include <cstdint>

#include "framework/cpu/math.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define STRATA_GEMM_AVX2 1
#endif

namespace strata {
namespace gemm_internal {

// Whether this build has the kernel and this CPU runs it (AVX2 and FMA).
bool cpu_has_avx2();

// C[M,N] (row stride ldc) = alpha * op(A) * op(B) + beta * C; beta == 0 never
// reads C. Threads split C into column (or row) stripes; inside a parallel
// region it runs on the calling thread alone. With `packer` (see
// gemm_pack_b), op(B) comes from it and B is unused. Requires M, N, K > 0 and
// cpu_has_avx2().
void gemm_avx2(Transpose ta, Transpose tb, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, const float* B, const GemmPackB* packer, float beta, float* C,
               int64_t ldc);

}  // namespace gemm_internal
}  // namespace strata

#ifdef STRATA_GEMM_AVX2
#include <immintrin.h>

namespace strata {
namespace gemm_internal {

// Every function that uses AVX2 carries this attribute (rather than a
// #pragma GCC target region, under which standard-library templates
// instantiated here would be compiled for AVX2 and could be picked by the
// linker for callers on CPUs without it). Callers check cpu_has_avx2().
#define STRATA_AVX2 __attribute__((target("avx2,fma")))

// In-register transpose of 8 rows of 8 floats: r[j] becomes column j. Used
// by the GEMM's packers; usable by other AVX2 packers (as transpose16 is).
STRATA_AVX2 __attribute__((always_inline)) inline void transpose8(__m256 r[8]) {
  __m256 t[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  __m256 s[8];
  for (int h = 0; h < 2; ++h) {  // rows 4h..4h+3: s[4h + c] holds columns c and c + 4
    s[4 * h + 0] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
    s[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xEE);
    s[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
    s[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
  }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(s[c], s[4 + c], 0x20);
    r[4 + c] = _mm256_permute2f128_ps(s[c], s[4 + c], 0x31);
  }
}

// even[j] = p[2j], odd[j] = p[2j + 1] for j < 8 (reads p[0..15]): within
// each 128-bit half lo's two, then hi's two; then the 64-bit quarters
// reordered 0, 2, 1, 3. Used by the Winograd transforms and max pooling.
STRATA_AVX2 __attribute__((always_inline)) inline void split_even_odd8(const float* p, __m256& even, __m256& odd) {
  const __m256 lo = _mm256_loadu_ps(p), hi = _mm256_loadu_ps(p + 8);
  even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xD8));
  odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xDD)), 0xD8));
}

}  // namespace gemm_internal
}  // namespace strata
#endif  // STRATA_GEMM_AVX2
