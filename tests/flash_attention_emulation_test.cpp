// The fused attention kernels (layers/multi_head_attention_flash_kernels.cuh)
// run on the CPU through tests/simt_emulation.h, against attention computed
// in double from the same 16-bit q, k, v and dO: forward's output and
// log-sum-exp, backward's dQ, dK and dV, in bf16 and f16, on shapes that cut
// the tiles raggedly. This checks the kernels' algebra (the online softmax,
// the log-sum-exp, the row dots, the scale) and their indexing in CI; the
// same kernels on a GPU are checked against the CPU layer by
// LayerStorage.FusedAttentionOnAGpuMatchesTheCpuAsTheUnfusedPathDoes.
#include "tests/simt_emulation.h"  // first: the dialect the kernels are written in

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "framework/layer_check.h"  // storage_check_tolerance
#include "framework/rng.h"
#include "layers/multi_head_attention_flash_kernels.cuh"

namespace strata {
namespace {

namespace fk = flash_attention::kernels;

struct Case {
  int n, heads, t, dh;
};

template <class E>
std::vector<E> random_values(size_t count, Rng& rng) {
  std::vector<E> out(count);
  for (E& e : out) e = cuda::store_element<E>(rng.gaussian(0.0f, 1.0f));
  return out;
}

template <class E>
double value(const std::vector<E>& v, size_t i) {
  return cuda::load_element(v[i]);
}

// |a - b| <= tolerance * max(|a|, |b|, 1) for every element, the worst named.
template <class E>
void expect_close(const char* what, const std::vector<double>& reference, const std::vector<E>& got, float tolerance) {
  ASSERT_EQ(reference.size(), got.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double a = reference[i], b = value(got, i);
    const double scale = std::max({std::fabs(a), std::fabs(b), 1.0});
    if (!(std::fabs(a - b) <= tolerance * scale) && bad++ < 3) {
      ADD_FAILURE() << what << " element " << i << ": reference " << a << ", kernel " << b << " (tolerance "
                    << tolerance << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what << ": mismatches in all";
}

template <class E>
void check_case(const Case& c, DType st) {
  SCOPED_TRACE("N " + std::to_string(c.n) + ", heads " + std::to_string(c.heads) + ", T " + std::to_string(c.t) +
               ", dh " + std::to_string(c.dh) + ", " + dtype_name(st));
  const int items = c.n * c.heads, t = c.t, dh = c.dh, dhp = fk::padded(dh);
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  const size_t size = static_cast<size_t>(items) * t * dh;
  Rng rng(7);
  const std::vector<E> q = random_values<E>(size, rng), k = random_values<E>(size, rng),
                       v = random_values<E>(size, rng), dout = random_values<E>(size, rng);
  std::vector<E> o(size), dq(size), dk(size), dv(size), o_rows(size);
  std::vector<float> lse(static_cast<size_t>(items) * t), dots(static_cast<size_t>(items) * t);
  const unsigned blocks = static_cast<unsigned>((t + fk::kRows - 1) / fk::kRows);

  simt::launch(items, blocks, fk::kThreads, fk::forward_bytes(dhp),
               [&] { fk::forward_kernel<E>(t, dh, dhp, scale, q.data(), k.data(), v.data(), o.data(), lse.data()); });
  // The layer hands row_dots the context in rows [N, T, heads, dh].
  for (int s = 0; s < c.n; ++s) {
    for (int h = 0; h < c.heads; ++h) {
      for (int i = 0; i < t; ++i) {
        for (int d = 0; d < dh; ++d) {
          o_rows[((static_cast<size_t>(s) * t + i) * c.heads + h) * dh + d] =
              o[((static_cast<size_t>(s) * c.heads + h) * t + i) * dh + d];
        }
      }
    }
  }
  fk::row_dots_kernel<E>(c.n, t, c.heads, dh, o_rows.data(), dout.data(), dots.data());
  simt::launch(items, blocks, fk::kThreads, fk::backward_kv_bytes(dhp), [&] {
    fk::backward_kv_kernel<E>(t, dh, dhp, scale, q.data(), k.data(), v.data(), dout.data(), lse.data(), dots.data(),
                              dk.data(), dv.data());
  });
  simt::launch(items, blocks, fk::kThreads, fk::backward_q_bytes(dhp), [&] {
    fk::backward_q_kernel<E>(t, dh, dhp, scale, q.data(), k.data(), v.data(), dout.data(), lse.data(), dots.data(),
                             dq.data());
  });

  // The reference, in double from the same stored values.
  std::vector<double> o_ref(size), dq_ref(size), dk_ref(size), dv_ref(size), lse_ref(lse.size());
  std::vector<double> p(static_cast<size_t>(t) * t), ds(p.size());
  for (int item = 0; item < items; ++item) {
    const size_t base = static_cast<size_t>(item) * t * dh;
    auto at = [&](const std::vector<E>& x, int row, int d) { return value(x, base + static_cast<size_t>(row) * dh + d); };
    for (int i = 0; i < t; ++i) {
      double most = -INFINITY;
      for (int j = 0; j < t; ++j) {
        double s = 0.0;
        for (int d = 0; d < dh; ++d) s += at(q, i, d) * at(k, j, d);
        p[i * t + j] = s * scale;
        most = std::max(most, p[i * t + j]);
      }
      double sum = 0.0;
      for (int j = 0; j < t; ++j) sum += (p[i * t + j] = std::exp(p[i * t + j] - most));
      for (int j = 0; j < t; ++j) p[i * t + j] /= sum;
      lse_ref[static_cast<size_t>(item) * t + i] = most + std::log(sum);
      double row_dot = 0.0;
      std::vector<double> dp(t);
      for (int j = 0; j < t; ++j) {
        for (int d = 0; d < dh; ++d) dp[j] += at(dout, i, d) * at(v, j, d);
        row_dot += dp[j] * p[i * t + j];
      }
      for (int j = 0; j < t; ++j) ds[i * t + j] = p[i * t + j] * (dp[j] - row_dot);
      for (int d = 0; d < dh; ++d) {
        double s = 0.0;
        for (int j = 0; j < t; ++j) s += p[i * t + j] * at(v, j, d);
        o_ref[base + static_cast<size_t>(i) * dh + d] = s;
      }
    }
    for (int i = 0; i < t; ++i) {
      for (int d = 0; d < dh; ++d) {
        double gq = 0.0, gk = 0.0, gv = 0.0;
        for (int j = 0; j < t; ++j) {
          gq += ds[i * t + j] * at(k, j, d);
          gk += ds[j * t + i] * at(q, j, d);
          gv += p[j * t + i] * at(dout, j, d);
        }
        const size_t e = base + static_cast<size_t>(i) * dh + d;
        dq_ref[e] = gq * scale;
        dk_ref[e] = gk * scale;
        dv_ref[e] = gv;
      }
    }
  }
  // Two roundings of the dtype: the result's own, and P's or dS's on the way.
  const float tolerance = storage_check_tolerance(st, 2);
  expect_close("o", o_ref, o, tolerance);
  expect_close("lse", lse_ref, lse, 1e-5f);
  expect_close("dq", dq_ref, dq, tolerance);
  expect_close("dk", dk_ref, dk, tolerance);
  expect_close("dv", dv_ref, dv, tolerance);
}

const Case kCases[] = {
    {2, 2, 70, 24},  // a second block of 6 queries; dh padded to 32
    {1, 1, 33, 80},  // backward's steps of 32 and one more
    {1, 2, 197, 64},  // ViT-B/16's heads and tokens
    {2, 3, 5, 8},    // fewer tokens than one tile; dh padded to 16
};

TEST(FlashAttentionEmulated, Bf16KernelsMatchAttentionInDouble) {
  for (const Case& c : kCases) check_case<Bf16>(c, DType::kBF16);
}

TEST(FlashAttentionEmulated, F16KernelsMatchAttentionInDouble) {
  for (const Case& c : kCases) check_case<F16>(c, DType::kF16);
}

}  // namespace
}  // namespace strata
