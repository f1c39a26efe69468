// The AMX BF16 GEMM (framework/cpu/gemm_bf16.h) against sums in double
// of the same bf16-rounded operands (whose products are exact in f32), for
// every transpose, both operand dtypes, edges of the register tile and of
// the k blocking, alpha and beta, and with several threads. Skipped, saying
// so, on a CPU without AMX.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "framework/cpu/gemm_bf16.h"
#include "framework/cpu/threads.h"
#include "framework/dtype.h"
#include "framework/rng.h"

namespace strata {
namespace {

struct Operand {
  std::vector<float> f32;      // as given
  std::vector<uint16_t> bf16;  // the same rounded
  std::vector<double> exact;   // what the GEMM multiplies: the bf16 values
};

Operand random_operand(int64_t n, uint64_t seed) {
  Rng rng(seed);
  Operand o;
  for (int64_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(rng.gaussian(0.0f, 1.0f));
    o.f32.push_back(v);
    o.bf16.push_back(float_to_bf16(v));
    o.exact.push_back(bf16_to_float(o.bf16.back()));
  }
  return o;
}

// Whether the GEMM of op(A) [M, K] and op(B) [K, N] matches sums in double
// within f32 accumulation's error (K roundings of the running sum); "" or
// the first difference.
std::string check(Transpose ta, Transpose tb, int64_t M, int64_t N, int64_t K, float alpha, float beta,
                  DType a_dtype, DType b_dtype) {
  const Operand a = random_operand(M * K, 1 + static_cast<uint64_t>(M * 7 + K));
  const Operand b = random_operand(K * N, 2 + static_cast<uint64_t>(N * 5 + K));
  const int64_t ldc = N + 3;  // C inside a wider matrix: its edges stay as they were
  std::vector<float> c(static_cast<size_t>(M * ldc));
  Rng rng(9);
  for (float& v : c) v = static_cast<float>(rng.gaussian(0.0f, 1.0f));
  const std::vector<float> c0 = c;
  const void* ap = a_dtype == DType::kBF16 ? static_cast<const void*>(a.bf16.data()) : a.f32.data();
  const void* bp = b_dtype == DType::kBF16 ? static_cast<const void*>(b.bf16.data()) : b.f32.data();
  gemm_bf16(ta, tb, M, N, K, alpha, ap, a_dtype, bp, b_dtype, beta, c.data(), ldc);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t at = static_cast<size_t>(i * ldc + j);
      if (j >= N) {
        if (c[at] != c0[at]) return "C beyond column N changed at row " + std::to_string(i);
        continue;
      }
      double sum = 0.0, magnitude = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double x = a.exact[static_cast<size_t>(ta == Transpose::kNo ? i * K + k : k * M + i)];
        const double y = b.exact[static_cast<size_t>(tb == Transpose::kNo ? k * N + j : j * K + k)];
        sum += x * y;
        magnitude += std::fabs(x * y);
      }
      const double want = alpha * sum + (beta == 0.0f ? 0.0 : beta * c0[at]);
      const double bound =
          (static_cast<double>(K) + 2.0) * 6e-8 * (std::fabs(alpha) * magnitude + std::fabs(beta * c0[at])) + 1e-30;
      if (!(std::fabs(c[at] - want) <= bound)) {
        return "C[" + std::to_string(i) + "][" + std::to_string(j) + "] = " + std::to_string(c[at]) + ", want " +
               std::to_string(want) + " (bound " + std::to_string(bound) + ")";
      }
    }
  }
  return "";
}

TEST(GemmBf16, MatchesExactSumsOfTheRoundedOperands) {
  if (!gemm_bf16_available()) GTEST_SKIP() << "this CPU has no AMX BF16 (or the AVX-512 path is off)";
  struct Size {
    int64_t m, n, k;
  };
  // 1x1x1; an odd K (the last pair half empty); rows and columns past the
  // 32 x 32 block; K across two and three k blocks (512 each); M past a
  // packed A block (256 rows) and N past a packed B block (1024 columns).
  const Size sizes[] = {{1, 1, 1},      {3, 5, 7},      {32, 32, 32},   {33, 33, 9},
                        {29, 70, 513},  {40, 65, 1100}, {300, 40, 70},  {20, 1100, 40}};
  for (const Size& s : sizes) {
    for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
      for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
        for (DType ad : {DType::kBF16, DType::kF32}) {
          for (DType bd : {DType::kBF16, DType::kF32}) {
            for (const auto& [alpha, beta] : {std::pair<float, float>{1.0f, 0.0f}, {0.5f, 1.0f}, {-2.0f, 0.25f}}) {
              SCOPED_TRACE(std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) + " ta " +
                           std::to_string(static_cast<int>(ta)) + " tb " + std::to_string(static_cast<int>(tb)) +
                           " A " + dtype_name(ad) + " B " + dtype_name(bd) + " alpha " + std::to_string(alpha) +
                           " beta " + std::to_string(beta));
              const std::string problem = check(ta, tb, s.m, s.n, s.k, alpha, beta, ad, bd);
              EXPECT_TRUE(problem.empty()) << problem;
            }
          }
        }
      }
    }
  }
}

// Large enough that the threads split C (column stripes, then row stripes).
TEST(GemmBf16, SeveralThreadsGiveTheSameBitsAsOne) {
  if (!gemm_bf16_available()) GTEST_SKIP() << "this CPU has no AMX BF16 (or the AVX-512 path is off)";
  const int saved = num_threads();
  for (const auto& [m, n] : {std::pair<int64_t, int64_t>{64, 256}, {300, 40}}) {
    const int64_t k = 200;
    const Operand a = random_operand(m * k, 3), b = random_operand(k * n, 4);
    std::vector<float> one(static_cast<size_t>(m * n)), two(one.size());
    set_num_threads(1);
    gemm_bf16(Transpose::kNo, Transpose::kYes, m, n, k, 1.0f, a.bf16.data(), DType::kBF16, b.f32.data(), DType::kF32,
              0.0f, one.data(), n);
    set_num_threads(2);
    gemm_bf16(Transpose::kNo, Transpose::kYes, m, n, k, 1.0f, a.bf16.data(), DType::kBF16, b.f32.data(), DType::kF32,
              0.0f, two.data(), n);
    EXPECT_EQ(one, two) << m << "x" << n;
  }
  set_num_threads(saved);
}

}  // namespace
}  // namespace strata
