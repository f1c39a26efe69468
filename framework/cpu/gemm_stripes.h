// Internal to the GEMM kernels (framework/cpu/math.cpp, gemm_avx2.cpp,
// gemm_avx512.cpp): how a GEMM is split over strata's threads. C is cut into
// column stripes of whole `col_unit`s (the kernel's B panels) or row stripes
// of whole `row_unit`s, one stripe per thread; one stripe (the calling thread
// alone) inside a parallel region or below ~4 MFLOP, where a fork and join
// cost more than they save.
#pragma once

#include <cstdint>

#include "framework/cpu/threads.h"

namespace strata {
namespace gemm_internal {

// Calls stripe(i0, i1, j0, j1) once per stripe of C[M, N], on as many of
// strata's threads as there are stripes; the stripes tile C.
template <typename Stripe>
void for_each_stripe(int64_t M, int64_t N, int64_t K, int64_t col_unit, int64_t row_unit, const Stripe& stripe) {
  int threads = in_parallel_region() ? 1 : num_threads();
  const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  if (flops < 4e6) threads = 1;
  const int64_t col_units = (N + col_unit - 1) / col_unit;
  const int64_t row_units = (M + row_unit - 1) / row_unit;
  const bool split_cols = col_units >= row_units || col_units >= 2 * threads;
  const int64_t units = split_cols ? col_units : row_units;
  if (threads > units) threads = static_cast<int>(units);
  if (threads <= 1) {
    stripe(int64_t{0}, M, int64_t{0}, N);
    return;
  }
  // One stripe of units per thread (parallel_for with min_chunk 1 makes
  // min(units, num_threads()) chunks, and threads <= units here).
  parallel_for(units, 1, [&](int64_t u0, int64_t u1) {
    if (split_cols) {
      const int64_t j0 = u0 * col_unit, j1 = u1 * col_unit < N ? u1 * col_unit : N;
      if (j1 > j0) stripe(int64_t{0}, M, j0, j1);
    } else {
      const int64_t i0 = u0 * row_unit, i1 = u1 * row_unit < M ? u1 * row_unit : M;
      if (i1 > i0) stripe(i0, i1, int64_t{0}, N);
    }
  });
}

}  // namespace gemm_internal
}  // namespace strata
