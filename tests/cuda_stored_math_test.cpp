// The GEMM with its bias in a cuBLASLt epilogue (framework/cuda/stored_math.h),
// what InnerProduct's 16-bit forward runs on a GPU: against the product in
// double from the same 16-bit operands, one rounding of the dtype apart; and
// the per-channel row sums of channels-last tensors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "framework/dtype.h"
#include "framework/tensor.h"
#include "tests/test_util.h"
#ifdef STRATA_WITH_CUDA
#include "framework/cuda/device_api.h"
#include "framework/cuda/stored_math.h"
#endif

namespace strata {
namespace {

#ifdef STRATA_WITH_CUDA

// n values in [-1, 1) rounded to `dtype`, as f32.
std::vector<float> rounded_values(int64_t n, DType dtype, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t s = seed;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>((s >> 8) & 0xffff) / 32768.0f - 1.0f;
  }
  if (dtype == DType::kF32) return v;
  std::vector<uint16_t> bits(v.size());
  convert_from_f32(dtype, v.data(), bits.data(), n);
  convert_to_f32(dtype, bits.data(), v.data(), n);
  return v;
}

Tensor on_gpu(const std::vector<float>& values, const Shape& shape, DType dtype) {
  Tensor host(shape, DType::kF32, Device::cpu());
  std::copy(values.begin(), values.end(), host.data<float>());
  Tensor stored(shape, dtype, Device::cpu());
  convert_from_f32(dtype, host.data<float>(), stored.raw_data(), host.numel());
  return stored.to(Device::cuda(0));
}

TEST(CudaStoredMath, BiasEpilogueMatchesTheProductInDouble) {
  STRATA_SKIP_WITHOUT_GPU("the cuBLASLt bias epilogue is compile-tested only");
  struct Size {
    int64_t m, n, k;
  };
  for (const DType dtype : {DType::kBF16, DType::kF16}) {
    const double unit = dtype == DType::kBF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);  // one rounding
    for (const Transpose tw : {Transpose::kNo, Transpose::kYes}) {
      for (const Size z : {Size{37, 29, 45}, Size{128, 256, 64}, Size{1, 3, 7}, Size{200, 768, 96}}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + (tw == Transpose::kYes ? " W^T " : " W ") +
                     std::to_string(z.m) + "x" + std::to_string(z.n) + "x" + std::to_string(z.k));
        const std::vector<float> x = rounded_values(z.m * z.k, dtype, 3), w = rounded_values(z.k * z.n, dtype, 5);
        std::vector<float> bias = rounded_values(z.n, DType::kF32, 7);
        for (float& b : bias) b *= 3.0f;
        const Shape w_shape = tw == Transpose::kYes ? Shape{z.n, z.k} : Shape{z.k, z.n};
        const Tensor dx = on_gpu(x, {z.m, z.k}, dtype), dw = on_gpu(w, w_shape, dtype);
        const Tensor db = on_gpu(bias, {z.n}, DType::kF32);
        Tensor dy({z.m, z.n}, dtype, Device::cuda(0));
        ASSERT_TRUE(cuda::gemm_stored_bias(tw, z.m, z.n, z.k, dx.raw_data(), dw.raw_data(), dtype,
                                           static_cast<const float*>(db.raw_data()), dy.raw_data()))
            << "cuBLASLt offers no bias epilogue for " << dtype_name(dtype) << " with an f32 bias on this GPU";
        const Tensor y16 = dy.to(Device::cpu());
        std::vector<float> y(static_cast<size_t>(z.m * z.n));
        convert_to_f32(dtype, y16.raw_data(), y.data(), z.m * z.n);
        for (int64_t r = 0; r < z.m; ++r) {
          for (int64_t c = 0; c < z.n; ++c) {
            double sum = bias[static_cast<size_t>(c)], mag = std::fabs(sum);
            for (int64_t i = 0; i < z.k; ++i) {
              const double wv = tw == Transpose::kYes ? w[static_cast<size_t>(c * z.k + i)]
                                                            : w[static_cast<size_t>(i * z.n + c)];
              const double t = static_cast<double>(x[static_cast<size_t>(r * z.k + i)]) * wv;
              sum += t;
              mag += std::fabs(t);
            }
            // One rounding of the result, plus f32 sums in any order.
            const double allowed = unit * std::fabs(sum) + 1e-5 * mag + 1e-30;
            ASSERT_LE(std::fabs(y[static_cast<size_t>(r * z.n + c)] - sum), allowed) << "at " << r << ", " << c;
          }
        }
      }
    }
  }
}

// dW += dY^T X (or X^T dY) and db += column sums of dY, both accumulated
// onto what the parameters held, against sums in double.
TEST(CudaStoredMath, LinearGradientsAccumulateWithTheBiasGradientFromTheEpilogue) {
  STRATA_SKIP_WITHOUT_GPU("the cuBLASLt bias-gradient epilogue is compile-tested only");
  struct Size {
    int64_t m, n, k;
  };
  for (const DType dtype : {DType::kBF16, DType::kF16}) {
    for (const bool output_major : {true, false}) {
      for (const Size z : {Size{37, 29, 45}, Size{256, 128, 64}, Size{3, 1, 7}}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + (output_major ? " output-major " : " input-major ") +
                     std::to_string(z.m) + "x" + std::to_string(z.n) + "x" + std::to_string(z.k));
        const std::vector<float> dy = rounded_values(z.m * z.n, dtype, 11), x = rounded_values(z.m * z.k, dtype, 13);
        const std::vector<float> w0 = rounded_values(z.n * z.k, DType::kF32, 17), b0 = rounded_values(z.n, DType::kF32, 19);
        const Tensor ddy = on_gpu(dy, {z.m, z.n}, dtype), dx = on_gpu(x, {z.m, z.k}, dtype);
        const Shape w_shape = output_major ? Shape{z.n, z.k} : Shape{z.k, z.n};
        Tensor dw = on_gpu(w0, w_shape, DType::kF32), db = on_gpu(b0, {z.n}, DType::kF32);
        const bool epilogue = cuda::linear_grads_stored(output_major, z.m, z.n, z.k, ddy.raw_data(), dx.raw_data(),
                                                        dtype, static_cast<float*>(dw.raw_data()),
                                                        static_cast<float*>(db.raw_data()));
        EXPECT_TRUE(epilogue) << "cuBLASLt took no bias-gradient epilogue: the column sums were a pass of their own";
        const Tensor w = dw.to(Device::cpu()), b = db.to(Device::cpu());
        for (int64_t c = 0; c < z.n; ++c) {
          double sum = b0[static_cast<size_t>(c)], mag = std::fabs(sum);
          for (int64_t r = 0; r < z.m; ++r) {
            sum += dy[static_cast<size_t>(r * z.n + c)];
            mag += std::fabs(dy[static_cast<size_t>(r * z.n + c)]);
          }
          ASSERT_NEAR(b.data<float>()[c], sum, 1e-5 * mag + 1e-6) << "db at " << c;
          for (int64_t i = 0; i < z.k; ++i) {
            const size_t at = static_cast<size_t>(output_major ? c * z.k + i : i * z.n + c);
            double g = w0[at], gmag = std::fabs(g);
            for (int64_t r = 0; r < z.m; ++r) {
              const double t = static_cast<double>(dy[static_cast<size_t>(r * z.n + c)]) * x[static_cast<size_t>(r * z.k + i)];
              g += t;
              gmag += std::fabs(t);
            }
            ASSERT_NEAR(w.data<float>()[at], g, 1e-5 * gmag + 1e-6) << "dW at " << c << ", " << i;
          }
        }
      }
    }
  }
}

// The per-channel row sums of channels-last tensors (BatchNorm, Scale and
// the convolution's bias gradient in NHWC): against the sums in double on
// the host from the same stored values, in each dtype and term, with a beta,
// channels not a multiple of 32 and rows over several slabs.
TEST(CudaStoredMath, ChannelRowSumsMatchTheSumsInDouble) {
  STRATA_SKIP_WITHOUT_GPU("the channel-last row sums are compile-tested only");
  const int64_t rows = 1500, channels = 45;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const std::vector<float> x = rounded_values(rows * channels, dtype, 11);
    const std::vector<float> w = rounded_values(rows * channels, dtype, 12);
    std::vector<float> center(static_cast<size_t>(channels)), start(static_cast<size_t>(channels));
    for (int64_t c = 0; c < channels; ++c) {
      center[static_cast<size_t>(c)] = 0.01f * static_cast<float>(c) - 0.2f;
      start[static_cast<size_t>(c)] = 0.5f + 0.1f * static_cast<float>(c);
    }
    const Tensor gx = on_gpu(x, {rows, channels}, dtype), gw = on_gpu(w, {rows, channels}, dtype);
    const Tensor gcenter = on_gpu(center, {channels}, DType::kF32);
    Tensor partial({cuda::row_sums_partials(rows, channels) * 8}, DType::kU8, Device::cuda(0));
    for (cuda::RowTerm term : {cuda::RowTerm::kValue, cuda::RowTerm::kProduct, cuda::RowTerm::kCenteredSquare}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " term " + std::to_string(static_cast<int>(term)));
      Tensor y = on_gpu(start, {channels}, DType::kF32);
      const double divisor = 3.0;
      const float beta = 0.5f;
      cuda::channel_row_sums(rows, channels, gx.raw_data(), gw.raw_data(), gcenter.device_data<float>(), dtype, term,
                             divisor, beta, y.device_data<float>(), static_cast<double*>(partial.raw_data()));
      const Tensor got = y.to(Device::cpu());
      for (int64_t c = 0; c < channels; ++c) {
        double sum = 0.0, mag = 0.0;
        for (int64_t r = 0; r < rows; ++r) {
          const double v = x[static_cast<size_t>(r * channels + c)];
          double t = v;
          if (term == cuda::RowTerm::kProduct) t = v * w[static_cast<size_t>(r * channels + c)];
          if (term == cuda::RowTerm::kCenteredSquare) t = (v - center[static_cast<size_t>(c)]) * (v - center[static_cast<size_t>(c)]);
          sum += t;
          mag += std::fabs(t);
        }
        const double want = sum / divisor + beta * start[static_cast<size_t>(c)];
        ASSERT_NEAR(got.data<float>()[c], want, 1e-6 * (mag / divisor + 1.0)) << "channel " << c;
      }
    }
  }
}

#else

TEST(CudaStoredMath, NeedsACudaBuild) { GTEST_SKIP() << "a CPU-only build has no cuBLASLt"; }

#endif

}  // namespace
}  // namespace strata
