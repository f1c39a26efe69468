// framework/cpu/math.h against naive double-precision references: gemm on both
// paths (the AVX-512 kernel where the CPU has it, and OpenBLAS), over shapes
// that cross the kernel's register tiles, 32-column panels, cache blocks and
// thread splits, with 1 and 2 configured threads, called from the test
// thread, from a std::thread and from several threads of an OpenMP parallel
// region at once; gemm_pack_b with a packer over a plain matrix; gemv, axpy,
// scale, dot, sum_squares; im2col / col2im (both overloads).
//
// Tolerance (gemm, gemm_pack_b, gemv), with C_ref computed in double:
//   |C - C_ref| <= 1e-5 * sqrt(max(K, 1)) * (|alpha| * sum_k |op(A)_ik * op(B)_kj| + |beta * C0_ij|)
// (float rounding of a K-term sum grows like sqrt(K) * 6e-8 on random data;
// a dropped or doubled term, or a wrong element, is orders of magnitude more).
// im2col / col2im move or add small integers and must match exactly.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "framework/cpu/cpu_isa.h"
#include "framework/error.h"
#include "framework/cpu/math.h"
#include "framework/cpu/threads.h"
#include "tests/test_util.h"

namespace strata {

// Readable GetParam() in the test list (and so in the ctest names), not raw
// bytes: found by argument-dependent lookup, so it lives in CpuIsa's namespace.
inline void PrintTo(CpuIsa isa, std::ostream* os) { *os << cpu_isa_name(isa); }

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

// Deterministic values in [-1, 1), exactly representable as floats.
class Values {
 public:
  explicit Values(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  float next() {
    s_ ^= s_ << 13;
    s_ ^= s_ >> 7;
    s_ ^= s_ << 17;
    return static_cast<float>(static_cast<double>(s_ >> 40) / static_cast<double>(1u << 23) - 1.0);
  }
  std::vector<float> vec(int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = next();
    return v;
  }
  int64_t below(int64_t n) { return static_cast<int64_t>(s_next() % static_cast<uint64_t>(n)); }

 private:
  uint64_t s_next() {
    next();
    return s_ >> 11;
  }
  uint64_t s_;
};

// Logical operands op(A) [M, K], op(B) [K, N], row-major, with op(A) * op(B)
// and sum_k |op(A)_ik * op(B)_kj| in double, and a starting C [M, N].
struct Problem {
  int64_t M = 0, N = 0, K = 0;
  std::vector<float> a, b, c0;
  std::vector<double> ab, abs_ab;
};

Problem make_problem(int64_t M, int64_t N, int64_t K, uint64_t seed) {
  Values v(seed);
  Problem p;
  p.M = M, p.N = N, p.K = K;
  p.a = v.vec(M * K);
  p.b = v.vec(K * N);
  p.c0 = v.vec(M * N);
  p.ab.assign(static_cast<size_t>(M * N), 0.0);
  p.abs_ab.assign(static_cast<size_t>(M * N), 0.0);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t k = 0; k < K; ++k) {
      const double a = p.a[i * K + k];
      for (int64_t j = 0; j < N; ++j) {
        const double t = a * p.b[k * N + j];
        p.ab[i * N + j] += t;
        p.abs_ab[i * N + j] += std::fabs(t);
      }
    }
  }
  return p;
}

// How gemm takes a logical [rows, cols] operand: as is, or stored transposed.
std::vector<float> stored(const std::vector<float>& op, int64_t rows, int64_t cols, Transpose t) {
  if (t == Transpose::kNo) return op;
  std::vector<float> s(op.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) s[c * rows + r] = op[r * cols + c];
  }
  return s;
}

const char* name(Transpose t) { return t == Transpose::kNo ? "N" : "T"; }

// C (row stride ldc) against alpha * op(A) op(B) + beta * C0 (C0 ignored for
// beta == 0) within the stated tolerance.
::testing::AssertionResult matches(const Problem& p, float alpha, float beta, const float* c, int64_t ldc) {
  const double tol = 1e-5 * std::sqrt(static_cast<double>(p.K > 1 ? p.K : 1));
  int64_t bad = 0;
  std::string first;
  for (int64_t i = 0; i < p.M; ++i) {
    for (int64_t j = 0; j < p.N; ++j) {
      const size_t e = static_cast<size_t>(i * p.N + j);
      const double c0 = beta == 0.0f ? 0.0 : static_cast<double>(beta) * p.c0[e];
      const double want = alpha * p.ab[e] + c0;
      const double bound = tol * (std::fabs(alpha) * p.abs_ab[e] + std::fabs(c0)) + 1e-30;
      const double got = c[i * ldc + j];
      if (!(std::fabs(got - want) <= bound)) {
        if (bad++ == 0) {
          first = "C[" + std::to_string(i) + "][" + std::to_string(j) + "] = " + std::to_string(got) +
                  ", want " + std::to_string(want) + " (bound " + std::to_string(bound) + ")";
        }
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << p.M * p.N << " wrong, first " << first;
}

// Runs gemm(ta, tb) on p into a C that starts as C0 (or NaN when beta == 0).
std::vector<float> run_gemm(const Problem& p, Transpose ta, Transpose tb, float alpha, float beta) {
  const std::vector<float> a = stored(p.a, p.M, p.K, ta);
  const std::vector<float> b = stored(p.b, p.K, p.N, tb);
  std::vector<float> c = beta == 0.0f ? std::vector<float>(p.c0.size(), kNaN) : p.c0;
  gemm(ta, tb, p.M, p.N, p.K, alpha, a.data(), b.data(), beta, c.data());
  return c;
}

// A gemm_pack_b packer over a plain op(B) [K, N]; counts calls that break the
// documented contract (block out of range, dst not 64-byte aligned).
GemmPackB plain_packer(const std::vector<float>& b, int64_t K, int64_t N, std::atomic<int>* violations) {
  return [&b, K, N, violations](int64_t k0, int64_t kc, int64_t j0, int64_t nc, float* dst) {
    if (k0 < 0 || kc <= 0 || k0 + kc > K || j0 < 0 || nc <= 0 || j0 + nc > N ||
        reinterpret_cast<uintptr_t>(dst) % 64 != 0) {
      ++*violations;
      return;
    }
    const int64_t panels = (nc + kGemmPanel - 1) / kGemmPanel;
    for (int64_t p = 0; p < panels; ++p) {
      for (int64_t k = 0; k < kc; ++k) {
        for (int64_t jj = 0; jj < kGemmPanel; ++jj) {
          const int64_t j = p * kGemmPanel + jj;
          dst[(p * kc + k) * kGemmPanel + jj] = j < nc ? b[(k0 + k) * N + j0 + j] : 0.0f;
        }
      }
    }
  };
}

const Transpose kBoth[] = {Transpose::kNo, Transpose::kYes};
const float kAlphas[] = {1.0f, 0.5f, -2.0f};
const float kBetas[] = {0.0f, 1.0f, 0.3f};

// ---- gemm / gemm_pack_b on each path, with 1 and 2 configured threads --------

using GemmParam = std::tuple<CpuIsa, int>;


// Every CPU path (framework/cpu/cpu_isa.h) this machine runs, with 1 and 2 threads.
class GemmTest : public ::testing::TestWithParam<GemmParam> {
 protected:
  void SetUp() override {
    saved_threads_ = num_threads();
    set_num_threads(std::get<1>(GetParam()));
    const CpuIsa isa = std::get<0>(GetParam());
    if (!cpu_isa_supported(isa)) GTEST_SKIP() << "this CPU cannot run the " << cpu_isa_name(isa) << " kernels";
    force_cpu_isa_for_testing(isa);
  }
  void TearDown() override {
    reset_cpu_isa_for_testing();
    set_num_threads(saved_threads_);
  }
  int saved_threads_ = 0;
};

// Every size in M, N and K in turn, the other two held at one of two bases.
TEST_P(GemmTest, MatchesDoubleReferenceOverShapes) {
  const int64_t sizes[] = {0, 1, 2, 7, 15, 16, 17, 31, 32, 33, 63, 65, 100, 257};
  const int64_t bases[][3] = {{17, 33, 31}, {65, 7, 100}};
  uint64_t seed = 1;
  for (const auto& base : bases) {
    for (int dim = 0; dim < 3; ++dim) {
      for (int64_t s : sizes) {
        int64_t mnk[3] = {base[0], base[1], base[2]};
        mnk[dim] = s;
        const Problem p = make_problem(mnk[0], mnk[1], mnk[2], seed++);
        for (Transpose ta : kBoth) {
          for (Transpose tb : kBoth) {
            for (float alpha : kAlphas) {
              for (float beta : kBetas) {
                const std::vector<float> c = run_gemm(p, ta, tb, alpha, beta);
                ASSERT_TRUE(matches(p, alpha, beta, c.data(), p.N))
                    << "M=" << p.M << " N=" << p.N << " K=" << p.K << " " << name(ta) << name(tb)
                    << " alpha=" << alpha << " beta=" << beta;
              }
            }
          }
        }
      }
    }
  }
}

// Shapes past the kernel's cache blocks (M > 384 rows, N > 4096 columns, K >
// 2 x 256) and large enough to be split over threads by columns and by rows.
TEST_P(GemmTest, LargeShapesCrossBlocksAndThreadSplits) {
  const int64_t shapes[][3] = {{400, 40, 20}, {9, 4133, 5}, {20, 30, 520}, {257, 100, 100}, {400, 32, 200},
                               {33, 300, 260}};
  uint64_t seed = 100;
  for (const auto& s : shapes) {
    const Problem p = make_problem(s[0], s[1], s[2], seed++);
    for (Transpose ta : kBoth) {
      for (Transpose tb : kBoth) {
        for (const auto& ab : {std::pair<float, float>{1.0f, 0.0f}, {-2.0f, 0.3f}}) {
          const std::vector<float> c = run_gemm(p, ta, tb, ab.first, ab.second);
          ASSERT_TRUE(matches(p, ab.first, ab.second, c.data(), p.N))
              << "M=" << p.M << " N=" << p.N << " K=" << p.K << " " << name(ta) << name(tb);
        }
      }
    }
  }
}

// beta == 0 writes C without reading it: NaN (or Inf) already there must not
// leak into the result, on the kernel's full and masked edge tiles, and with
// K == 0.
TEST_P(GemmTest, BetaZeroIgnoresNaNAlreadyInC) {
  for (const auto& s : {std::vector<int64_t>{5, 40, 9}, {17, 32, 300}, {3, 7, 0}, {1, 1, 1}}) {
    const Problem p = make_problem(s[0], s[1], s[2], 7);
    for (Transpose ta : kBoth) {
      for (Transpose tb : kBoth) {
        const std::vector<float> c = run_gemm(p, ta, tb, 0.5f, 0.0f);  // C starts as NaN
        EXPECT_TRUE(matches(p, 0.5f, 0.0f, c.data(), p.N)) << "M=" << p.M << " N=" << p.N << " K=" << p.K;
      }
    }
    std::vector<float> c(static_cast<size_t>(s[0] * s[1]), std::numeric_limits<float>::infinity());
    gemm(Transpose::kNo, Transpose::kNo, p.M, p.N, p.K, 1.0f, p.a.data(), p.b.data(), 0.0f, c.data());
    EXPECT_TRUE(matches(p, 1.0f, 0.0f, c.data(), p.N));
  }
}

// Several threads of an OpenMP parallel region call gemm and gemm_pack_b at
// once on different outputs (as the Convolution layer's chunks do), and a
// std::thread calls them outside any region.
TEST_P(GemmTest, ConcurrentCallsFromOpenMPAndPlainThreads) {
  const int64_t shapes[][3] = {{17, 33, 31}, {130, 70, 300}, {1, 65, 7}, {64, 100, 257}};
  constexpr int kJobs = 16;
  std::vector<Problem> problems;
  for (int j = 0; j < kJobs; ++j) {
    const auto& s = shapes[j % 4];
    problems.push_back(make_problem(s[0], s[1], s[2], 200 + static_cast<uint64_t>(j)));
  }
  std::vector<std::vector<float>> out(kJobs);
  std::atomic<int> violations{0};
  auto job = [&](int j) {
    const Problem& p = problems[static_cast<size_t>(j)];
    if (j % 2 == 0) {
      const Transpose ta = kBoth[(j / 2) % 2];
      const Transpose tb = kBoth[(j / 4) % 2];
      out[static_cast<size_t>(j)] = run_gemm(p, ta, tb, -2.0f, 0.3f);
    } else {
      const Transpose ta = kBoth[(j / 2) % 2];
      const std::vector<float> a = stored(p.a, p.M, p.K, ta);
      std::vector<float>& c = out[static_cast<size_t>(j)];
      c = p.c0;
      gemm_pack_b(ta, p.M, p.N, p.K, -2.0f, a.data(), plain_packer(p.b, p.K, p.N, &violations), 0.3f, c.data(),
                  p.N);
    }
  };
#pragma omp parallel for num_threads(4) schedule(dynamic, 1)
  for (int j = 0; j < kJobs; ++j) job(j);
  for (int j = 0; j < kJobs; ++j) {
    EXPECT_TRUE(matches(problems[static_cast<size_t>(j)], -2.0f, 0.3f, out[static_cast<size_t>(j)].data(),
                        problems[static_cast<size_t>(j)].N))
        << "OpenMP job " << j;
  }
  for (auto& c : out) c.clear();
  std::thread t([&] {
    for (int j = 0; j < 4; ++j) job(j);
  });
  t.join();
  for (int j = 0; j < 4; ++j) {
    EXPECT_TRUE(matches(problems[static_cast<size_t>(j)], -2.0f, 0.3f, out[static_cast<size_t>(j)].data(),
                        problems[static_cast<size_t>(j)].N))
        << "std::thread job " << j;
  }
  EXPECT_EQ(violations.load(), 0);
}

// gemm_pack_b with a packer over a plain matrix matches gemm on the same
// operands: both transposes of A, partial last panels, ldc > N (the columns
// past N untouched), beta == 0 over NaN, K == 0 (the packer never called).
TEST_P(GemmTest, PackBMatchesGemm) {
  const int64_t shapes[][3] = {{1, 1, 1},   {7, 31, 17},  {17, 32, 33},   {16, 33, 257}, {100, 65, 300},
                               {13, 100, 2}, {5, 4133, 3}, {257, 70, 100}, {4, 9, 0}};
  const float kCanary = 12345.0f;
  uint64_t seed = 300;
  for (const auto& s : shapes) {
    const Problem p = make_problem(s[0], s[1], s[2], seed++);
    for (int64_t extra : {0, 3, 32}) {
      const int64_t ldc = p.N + extra;
      for (Transpose ta : kBoth) {
        const std::vector<float> a = stored(p.a, p.M, p.K, ta);
        for (const auto& ab : {std::pair<float, float>{1.0f, 0.0f}, {0.5f, 1.0f}, {-2.0f, 0.3f}}) {
          const float alpha = ab.first, beta = ab.second;
          std::vector<float> c(static_cast<size_t>(p.M * ldc), kCanary);
          for (int64_t i = 0; i < p.M; ++i) {
            for (int64_t j = 0; j < p.N; ++j) c[i * ldc + j] = beta == 0.0f ? kNaN : p.c0[i * p.N + j];
          }
          std::atomic<int> violations{0};
          std::atomic<int> calls{0};
          const GemmPackB inner = plain_packer(p.b, p.K, p.N, &violations);
          const GemmPackB packer = [&](int64_t k0, int64_t kc, int64_t j0, int64_t nc, float* dst) {
            ++calls;
            inner(k0, kc, j0, nc, dst);
          };
          gemm_pack_b(ta, p.M, p.N, p.K, alpha, a.data(), packer, beta, c.data(), ldc);
          const std::string what = "M=" + std::to_string(p.M) + " N=" + std::to_string(p.N) + " K=" +
                                   std::to_string(p.K) + " ldc=" + std::to_string(ldc) + " " + name(ta) +
                                   " alpha=" + std::to_string(alpha) + " beta=" + std::to_string(beta);
          ASSERT_EQ(violations.load(), 0) << what;
          if (p.K == 0) {
            EXPECT_EQ(calls.load(), 0) << what;
          }
          ASSERT_TRUE(matches(p, alpha, beta, c.data(), ldc)) << what;
          for (int64_t i = 0; i < p.M; ++i) {
            for (int64_t j = p.N; j < ldc; ++j) ASSERT_EQ(c[i * ldc + j], kCanary) << what << " column " << j;
          }
          const std::vector<float> g = run_gemm(p, ta, Transpose::kNo, alpha, beta);
          for (int64_t i = 0; i < p.M; ++i) {
            for (int64_t j = 0; j < p.N; ++j) {
              const double bound = 2e-5 * std::sqrt(static_cast<double>(p.K + 1)) *
                                   (std::fabs(alpha) * p.abs_ab[i * p.N + j] + std::fabs(beta) + 1e-30);
              ASSERT_LE(std::fabs(c[i * ldc + j] - g[i * p.N + j]), bound) << what << " vs gemm";
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Paths, GemmTest,
    ::testing::Combine(::testing::Values(CpuIsa::kAvx512, CpuIsa::kAvx2, CpuIsa::kPortable), ::testing::Values(1, 2)),
    [](const ::testing::TestParamInfo<GemmParam>& info) {
      const CpuIsa isa = std::get<0>(info.param);
      return std::string(isa == CpuIsa::kAvx512 ? "Avx512" : isa == CpuIsa::kAvx2 ? "Avx2" : "Portable") + "_" +
             std::to_string(std::get<1>(info.param)) + "threads";
    });

TEST(CpuIsaTest, TheBestPathIsTheDefaultAndEachSupportedPathCanBeForced) {
  EXPECT_TRUE(cpu_isa_supported(CpuIsa::kPortable));
#if defined(__x86_64__)
  EXPECT_EQ(cpu_isa_supported(CpuIsa::kAvx512), __builtin_cpu_supports("avx512f") &&
                                                    __builtin_cpu_supports("avx512dq") &&
                                                    __builtin_cpu_supports("avx512bw") &&
                                                    __builtin_cpu_supports("avx512vl"));
  EXPECT_EQ(cpu_isa_supported(CpuIsa::kAvx2), __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
#endif
  const CpuIsa best = cpu_isa_supported(CpuIsa::kAvx512) ? CpuIsa::kAvx512
                      : cpu_isa_supported(CpuIsa::kAvx2) ? CpuIsa::kAvx2
                                                         : CpuIsa::kPortable;
  EXPECT_EQ(parse_cpu_isa(nullptr), best);
  EXPECT_EQ(parse_cpu_isa(""), best);
  for (CpuIsa isa : {CpuIsa::kAvx512, CpuIsa::kAvx2, CpuIsa::kPortable}) {
    if (!cpu_isa_supported(isa)) continue;
    EXPECT_EQ(parse_cpu_isa(cpu_isa_name(isa)), isa);
    force_cpu_isa_for_testing(isa);
    EXPECT_EQ(cpu_isa(), isa);
    reset_cpu_isa_for_testing();
  }
}

TEST(CpuIsaTest, AnUnknownOrUnsupportedPathIsRefusedNamingTheVariable) {
  const std::string unknown = test::error_of<ConfigError>([] { parse_cpu_isa("sse4"); });
  EXPECT_CONTAINS(unknown, "STRATA_CPU_ISA='sse4'");
  EXPECT_CONTAINS(unknown, "avx512, avx2 or portable");
  for (CpuIsa isa : {CpuIsa::kAvx512, CpuIsa::kAvx2}) {
    if (cpu_isa_supported(isa)) continue;
    const std::string msg = test::error_of<ConfigError>([&] { parse_cpu_isa(cpu_isa_name(isa)); });
    EXPECT_CONTAINS(msg, std::string("STRATA_CPU_ISA=") + cpu_isa_name(isa));
    EXPECT_CONTAINS(msg, "cannot run");
    EXPECT_CONTAINS(msg, "portable runs anywhere");
  }
}

extern "C" int openblas_get_num_threads();

TEST(CpuIsaTest, OpenBlasRunsSingleThreadedInsideStrataThreads) {
  // strata's pool owns the threads: a GEMM on the portable path splits C
  // into stripes over it, and OpenBLAS itself stays at one thread.
  force_cpu_isa_for_testing(CpuIsa::kPortable);
  const int saved = num_threads();
  set_num_threads(2);
  const Problem p = make_problem(64, 300, 200, 7);
  std::vector<float> c(64 * 300, std::numeric_limits<float>::quiet_NaN());
  gemm(Transpose::kNo, Transpose::kNo, 64, 300, 200, 1.0f, p.a.data(), p.b.data(), 0.0f, c.data());
  EXPECT_EQ(openblas_get_num_threads(), 1);
  EXPECT_TRUE(matches(p, 1.0f, 0.0f, c.data(), 300));
  set_num_threads(saved);
  reset_cpu_isa_for_testing();
}

// ---- gemv and the vector operations --------------------------------------------

TEST(MathVectorOps, GemvMatchesDoubleReference) {
  uint64_t seed = 400;
  for (int64_t M : {0, 1, 7, 33, 100}) {
    for (int64_t N : {0, 1, 16, 65}) {
      Values v(seed++);
      const std::vector<float> A = v.vec(M * N);  // [M, N]
      for (Transpose t : kBoth) {
        const int64_t in = t == Transpose::kNo ? N : M;
        const int64_t out = t == Transpose::kNo ? M : N;
        const std::vector<float> x = v.vec(in);
        const std::vector<float> y0 = v.vec(out);
        for (float alpha : kAlphas) {
          for (float beta : kBetas) {
            std::vector<float> y = beta == 0.0f ? std::vector<float>(y0.size(), kNaN) : y0;
            gemv(t, M, N, alpha, A.data(), x.data(), beta, y.data());
            for (int64_t r = 0; r < out; ++r) {
              double s = 0.0, abs_s = 0.0;
              for (int64_t k = 0; k < in; ++k) {
                const double term = static_cast<double>(t == Transpose::kNo ? A[r * N + k] : A[k * N + r]) * x[k];
                s += term;
                abs_s += std::fabs(term);
              }
              const double c0 = beta == 0.0f ? 0.0 : static_cast<double>(beta) * y0[r];
              const double bound =
                  1e-5 * std::sqrt(static_cast<double>(in > 1 ? in : 1)) * (std::fabs(alpha) * abs_s + std::fabs(c0)) +
                  1e-30;
              ASSERT_LE(std::fabs(y[r] - (alpha * s + c0)), bound)
                  << "M=" << M << " N=" << N << " " << name(t) << " alpha=" << alpha << " beta=" << beta << " y["
                  << r << "]=" << y[r];
            }
          }
        }
      }
    }
  }
}

TEST(MathVectorOps, AxpyScaleDotSumSquares) {
  for (int64_t n : {0, 1, 7, 16, 17, 1000}) {
    Values v(static_cast<uint64_t>(500 + n));
    const std::vector<float> x = v.vec(n);
    const std::vector<float> y0 = v.vec(n);
    std::vector<float> y = y0;
    axpy(n, -0.75f, x.data(), y.data());
    for (int64_t i = 0; i < n; ++i) {
      const double want = y0[i] - 0.75 * x[i];
      ASSERT_LE(std::fabs(y[i] - want), 1e-7 * (std::fabs(y0[i]) + std::fabs(x[i]))) << "axpy n=" << n << " i=" << i;
    }
    std::vector<float> z = x;
    scale(n, -3.0f, z.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(z[i], -3.0f * x[i]) << "scale n=" << n;
    double d = 0.0, abs_d = 0.0, sq = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      d += static_cast<double>(x[i]) * y0[i];
      abs_d += std::fabs(static_cast<double>(x[i]) * y0[i]);
      sq += static_cast<double>(x[i]) * x[i];
    }
    // Accumulated in double: exact products, so only double rounding remains.
    EXPECT_NEAR(dot(n, x.data(), y0.data()), d, 1e-12 * (abs_d + 1e-300)) << "dot n=" << n;
    EXPECT_NEAR(sum_squares(n, x.data()), sq, 1e-12 * (sq + 1e-300)) << "sum_squares n=" << n;
  }
}

// ---- im2col / col2im ---------------------------------------------------------------

struct Geometry {
  int64_t c, h, w, kh, kw, ph, pw, sh, sw, dh, dw;
  int64_t out_h() const { return (h + 2 * ph - (dh * (kh - 1) + 1)) / sh + 1; }
  int64_t out_w() const { return (w + 2 * pw - (dw * (kw - 1) + 1)) / sw + 1; }
  bool valid() const { return h + 2 * ph >= dh * (kh - 1) + 1 && w + 2 * pw >= dw * (kw - 1) + 1; }
  std::string str() const {
    return "C=" + std::to_string(c) + " HxW=" + std::to_string(h) + "x" + std::to_string(w) + " k=" +
           std::to_string(kh) + "x" + std::to_string(kw) + " pad=" + std::to_string(ph) + "," + std::to_string(pw) +
           " stride=" + std::to_string(sh) + "," + std::to_string(sw) + " dil=" + std::to_string(dh) + "," +
           std::to_string(dw);
  }
};

// Hand-picked cases (a padded window larger than the image, "same" padding,
// 1-pixel images) and random ones.
std::vector<Geometry> geometries() {
  std::vector<Geometry> g = {
      {1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1}, {2, 5, 5, 3, 3, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 5, 5, 2, 2, 1, 1, 1, 1},
      {2, 1, 4, 5, 3, 2, 1, 1, 1, 1, 1}, {1, 2, 6, 3, 3, 2, 1, 1, 1, 1, 1}, {3, 7, 6, 3, 2, 1, 0, 2, 1, 2, 1},
      {1, 8, 8, 3, 3, 3, 3, 3, 2, 1, 2}, {2, 4, 9, 1, 1, 0, 0, 1, 1, 1, 1},
  };
  Values v(600);
  while (g.size() < 600) {
    Geometry x{1 + v.below(3), 1 + v.below(9), 1 + v.below(9), 1 + v.below(5), 1 + v.below(5), v.below(4),
               v.below(4),     1 + v.below(3), 1 + v.below(3), 1 + v.below(3), 1 + v.below(3)};
    if (x.valid()) g.push_back(x);
  }
  return g;
}

// Image values: small distinct integers, so sums are exact.
std::vector<float> int_values(int64_t n, int64_t base) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((base + 7 * i) % 23 - 11);
  return v;
}

// The input pixel behind col row (c, ki, kj), output pixel (oh, ow), or -1 in the padding.
int64_t source(const Geometry& g, int64_t c, int64_t ki, int64_t kj, int64_t oh, int64_t ow) {
  const int64_t ih = oh * g.sh - g.ph + ki * g.dh;
  const int64_t iw = ow * g.sw - g.pw + kj * g.dw;
  if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) return -1;
  return (c * g.h + ih) * g.w + iw;
}

TEST(Im2Col, MatchesNaiveWithStridePadDilationAndColLd) {
  const float kCanary = -777.0f;
  for (const Geometry& g : geometries()) {
    const int64_t hw = g.out_h() * g.out_w();
    const int64_t rows = g.c * g.kh * g.kw;
    const std::vector<float> im = int_values(g.c * g.h * g.w, g.h * 31 + g.w);
    // Plain overload: exactly [rows, hw], checked with a guard after it.
    std::vector<float> col(static_cast<size_t>(rows * hw + 16), kCanary);
    im2col(im.data(), g.c, g.h, g.w, g.kh, g.kw, g.ph, g.pw, g.sh, g.sw, g.dh, g.dw, col.data());
    // col_ld overload: image i of 3 sharing one buffer, at column i * hw.
    const int64_t n = 3, ld = n * hw;
    for (int64_t img : {int64_t{0}, n - 1}) {
      std::vector<float> shared(static_cast<size_t>(rows * ld + 16), kCanary);
      im2col(im.data(), g.c, g.h, g.w, g.kh, g.kw, g.ph, g.pw, g.sh, g.sw, g.dh, g.dw, shared.data() + img * hw, ld);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t c = r / (g.kh * g.kw), ki = r / g.kw % g.kh, kj = r % g.kw;
        for (int64_t j = 0; j < ld; ++j) {
          const float got = shared[r * ld + j];
          if (j / hw != img) {
            ASSERT_EQ(got, kCanary) << g.str() << ": image " << img << " wrote row " << r << " column " << j;
            continue;
          }
          const int64_t oh = j % hw / g.out_w(), ow = j % hw % g.out_w();
          const int64_t s = source(g, c, ki, kj, oh, ow);
          ASSERT_EQ(got, s < 0 ? 0.0f : im[s]) << g.str() << " col_ld row " << r << " pixel " << j % hw;
          if (img == 0) {
            ASSERT_EQ(col[r * hw + j], got) << g.str() << " plain overload row " << r;
          }
        }
      }
      for (int64_t e = rows * ld; e < rows * ld + 16; ++e) ASSERT_EQ(shared[e], kCanary) << g.str() << " past the end";
    }
    for (int64_t e = rows * hw; e < rows * hw + 16; ++e) ASSERT_EQ(col[e], kCanary) << g.str() << " past the end";
  }
}

TEST(Col2Im, AccumulatesLikeNaiveWithStridePadDilationAndColLd) {
  const float kCanary = -777.0f;
  for (const Geometry& g : geometries()) {
    const int64_t hw = g.out_h() * g.out_w();
    const int64_t rows = g.c * g.kh * g.kw;
    const int64_t pixels = g.c * g.h * g.w;
    const int64_t n = 3, ld = n * hw, img = 1;
    // Columns of image `img` in a shared buffer; the other images' columns
    // hold large values that must not be read.
    std::vector<float> shared(static_cast<size_t>(rows * ld), 1e6f);
    const std::vector<float> vals = int_values(rows * hw, g.c + g.kh * 5);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < hw; ++j) shared[r * ld + img * hw + j] = vals[r * hw + j];
    }
    // Naive: start from an image that is not zero (col2im accumulates).
    const std::vector<float> start = int_values(pixels, 3);
    std::vector<float> want = start;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t c = r / (g.kh * g.kw), ki = r / g.kw % g.kh, kj = r % g.kw;
      for (int64_t j = 0; j < hw; ++j) {
        const int64_t s = source(g, c, ki, kj, j / g.out_w(), j % g.out_w());
        if (s >= 0) want[s] += vals[r * hw + j];
      }
    }
    std::vector<float> im(static_cast<size_t>(pixels + 16), kCanary);
    std::copy(start.begin(), start.end(), im.begin());
    col2im(shared.data() + img * hw, ld, g.c, g.h, g.w, g.kh, g.kw, g.ph, g.pw, g.sh, g.sw, g.dh, g.dw, im.data());
    for (int64_t p = 0; p < pixels; ++p) ASSERT_EQ(im[p], want[p]) << g.str() << " col_ld pixel " << p;
    for (int64_t e = pixels; e < pixels + 16; ++e) ASSERT_EQ(im[e], kCanary) << g.str() << " past the end";
    // Plain overload over a compact [rows, hw] buffer.
    std::vector<float> im2(start);
    col2im(vals.data(), g.c, g.h, g.w, g.kh, g.kw, g.ph, g.pw, g.sh, g.sw, g.dh, g.dw, im2.data());
    for (int64_t p = 0; p < pixels; ++p) ASSERT_EQ(im2[p], want[p]) << g.str() << " plain pixel " << p;
  }
}

}  // namespace
}  // namespace strata
