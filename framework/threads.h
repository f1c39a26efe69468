// The number of CPU threads used by GEMM (OpenBLAS) and by the layers' own loops.
#pragma once

#include <cstdint>

namespace strata {

// n <= 0 means all cores. Applies to OpenBLAS and to parallel_for.
void set_num_threads(int n);
int num_threads();
int hardware_threads();

// Runs body(begin, end) over [0, n) split into contiguous chunks on the
// configured threads. Small ranges (n < min_chunk * 2) run inline.
template <typename Body>
void parallel_for(int64_t n, int64_t min_chunk, const Body& body);

}  // namespace strata

#include <omp.h>

namespace strata {

template <typename Body>
void parallel_for(int64_t n, int64_t min_chunk, const Body& body) {
  if (n <= 0) return;
  const int threads = num_threads();
  if (threads <= 1 || n < 2 * min_chunk) {
    body(int64_t{0}, n);
    return;
  }
  int64_t chunks = n / (min_chunk > 0 ? min_chunk : 1);
  if (chunks > threads) chunks = threads;
#pragma omp parallel for num_threads(static_cast<int>(chunks)) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = n * c / chunks;
    const int64_t end = n * (c + 1) / chunks;
    body(begin, end);
  }
}

}  // namespace strata
