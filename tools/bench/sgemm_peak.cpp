// The machine's measured SGEMM peak (GFLOP/s) through the same OpenBLAS and
// thread count strata uses: the yardstick for model FLOPs utilisation.
//   strata_bench_sgemm [threads] [size]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "framework/cpu/math.h"
#include "framework/rng.h"
#include "framework/cpu/threads.h"

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int64_t n = argc > 2 ? std::atoll(argv[2]) : 1024;
  strata::set_num_threads(threads);
  std::vector<float> a(n * n), b(n * n), c(n * n);
  strata::Rng rng(0);
  for (auto& v : a) v = rng.uniform(-1, 1);
  for (auto& v : b) v = rng.uniform(-1, 1);
  strata::gemm(strata::Transpose::kNo, strata::Transpose::kNo, n, n, n, 1.0f, a.data(), b.data(), 0.0f, c.data());
  std::vector<double> rates;
  for (int r = 0; r < 9; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const int reps = 5;
    for (int i = 0; i < reps; ++i) {
      strata::gemm(strata::Transpose::kNo, strata::Transpose::kNo, n, n, n, 1.0f, a.data(), b.data(), 0.0f,
                   c.data());
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(2.0 * n * n * n * reps / s / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  std::printf("{\"sgemm_n\": %lld, \"threads\": %d, \"gflops_median\": %.2f, \"gflops_max\": %.2f}\n",
              static_cast<long long>(n), threads, rates[rates.size() / 2], rates.back());
  return 0;
}
