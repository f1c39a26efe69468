// The convolution's GEMMs on AMX tiles, for calls on bf16 blobs on a CPU
// that has them (framework/cpu/gemm_bf16.h). Where Winograd does not run
// (a first layer on few channels, 1x1, strided or dilated kernels), the
// im2col and 1x1 paths multiply here in place of the f32 patch path.
//
// The images and the top gradients of such a call are bf16 values widened
// to f32 (the 16-bit path's chunks), so the tiles take them exactly. The
// weight is not: rounded to bf16 it would put an error of 2^-9 in every
// product, well beyond the 16-bit path's check against f32 under
// cancellation (a 3 x 3 x 16 convolution missed it by 3x). It is split into
// two bf16 parts, w = hi + lo to about 2^-16, and multiplied twice, so the
// products keep the f32 path's accuracy; the weight gradient, a product of
// two bf16 operands, is one tile GEMM.
#include <cstdint>

#include "framework/cpu/gemm_bf16.h"
#include "framework/cpu/threads.h"
#include "framework/dtype.h"
#include "layers/convolution/convolution.h"

namespace strata {

bool ConvolutionLayer::use_bf16_tiles() const {
  return call_dtype() == DType::kBF16 && !use_winograd() && gemm_bf16_available();
}

void ConvolutionLayer::split_weight_for_tiles(Workspace& filters) const {
  const float* w = param(0).data.data<float>();
  uint16_t* hi = filters.w_hi.data<uint16_t>();
  uint16_t* lo = filters.w_lo.data<uint16_t>();
  parallel_for(param(0).numel(), 32768, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      hi[i] = float_to_bf16(w[i]);
      lo[i] = float_to_bf16(w[i] - bf16_to_float(hi[i]));
    }
  });
}

void ConvolutionLayer::multiply_weight(Transpose tw, Transpose tb, int64_t M, int64_t N, int64_t K, int64_t w_offset,
                                       const float* B, float beta, float* C, const Workspace& ws) const {
  if (!use_bf16_tiles() || M == 0 || N == 0 || K == 0) {
    gemm(tw, tb, M, N, K, 1.0f, param(0).data.data<float>() + w_offset, B, beta, C);
    return;
  }
  gemm_bf16(tw, tb, M, N, K, 1.0f, ws.w_hi.data<uint16_t>() + w_offset, DType::kBF16, B, DType::kF32, beta, C, N);
  gemm_bf16(tw, tb, M, N, K, 1.0f, ws.w_lo.data<uint16_t>() + w_offset, DType::kBF16, B, DType::kF32, 1.0f, C, N);
}

void ConvolutionLayer::multiply_data(Transpose ta, Transpose tb, int64_t M, int64_t N, int64_t K, const float* A,
                                     const float* B, float beta, float* C) const {
  if (!use_bf16_tiles() || M == 0 || N == 0 || K == 0) {
    gemm(ta, tb, M, N, K, 1.0f, A, B, beta, C);
    return;
  }
  gemm_bf16(ta, tb, M, N, K, 1.0f, A, DType::kF32, B, DType::kF32, beta, C, N);
}

}  // namespace strata
