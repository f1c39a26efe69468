// The Convolution layer's members on the patch path (layers/convolution/convolution_patches.h):
// padding a chunk's images and the patch GEMMs. Part of layers/convolution.*.
#include <cstdint>
#include <cstring>
#include <vector>

#include "layers/convolution/convolution_patches.h"
#include "framework/error.h"
#include "framework/cpu/gemm_avx512.h"
#include "framework/cpu/math.h"
#include "layers/convolution/convolution.h"

namespace strata {

// Copies images [i0, i0 + n) of x ([N, channels, height, width]) into dst
// with pad_h / pad_w zeros around each plane (a negative pad crops).
void ConvolutionLayer::pad_images(const float* x, int64_t i0, int64_t n, int64_t channels, int64_t height,
                                  int64_t width, Hw pad, float* dst) {
  const int64_t hp = height + 2 * pad.h;
  const int64_t wp = width + 2 * pad.w;
  // Columns of a padded row that come from the image.
  const int64_t c_lo = pad.w > 0 ? pad.w : 0;
  const int64_t c_hi = width + pad.w < wp ? width + pad.w : wp;
  const float* src = x + i0 * channels * height * width;
  for (int64_t p = 0; p < n * channels; ++p, src += height * width) {
    for (int64_t r = 0; r < hp; ++r, dst += wp) {
      const int64_t ih = r - pad.h;
      if (ih < 0 || ih >= height || c_hi <= c_lo) {
        std::memset(dst, 0, sizeof(float) * wp);
        continue;
      }
      // Pads are a few floats: plain loops beat memset calls there.
      for (int64_t c = 0; c < c_lo; ++c) dst[c] = 0.0f;
      std::memcpy(dst + c_lo, src + ih * width + (c_lo - pad.w), sizeof(float) * (c_hi - c_lo));
      for (int64_t c = c_hi; c < wp; ++c) dst[c] = 0.0f;
    }
  }
}

void ConvolutionLayer::multiply_patches(const Patches& p, Orientation o, int64_t M, int64_t N, int64_t K,
                                        const float* a, float beta, float* c, int64_t ldc) const {
#ifdef STRATA_CONV_PATCHES
  const conv_patches::PatchGeometry g{p.x,        p.image_stride, p.plane,    p.width,    p.out_h,      p.out_w,
                                      p.kernel.h, p.kernel.w,     p.stride.h, p.stride.w, p.dilation.h, p.dilation.w};
  GemmPackB pack;
  if (o == Orientation::kPixelColumns) {
    pack = [&g](int64_t k0, int64_t kc, int64_t j0, int64_t nc, float* dst) {
      conv_patches::pack_patches_across(g, k0, kc, j0, nc, dst);
    };
  } else {
    pack = [&g](int64_t k0, int64_t kc, int64_t j0, int64_t nc, float* dst) {
      conv_patches::pack_patches_down(g, k0, kc, j0, nc, dst);
    };
  }
  gemm_pack_b(Transpose::kNo, M, N, K, 1.0f, a, pack, beta, c, ldc);
#else
  (void)p, (void)o, (void)M, (void)N, (void)K, (void)a, (void)beta, (void)c, (void)ldc;
  fail<Error>("patch packing is not available in this build");
#endif
}

// Patches of the chunk's input images (padded into ws.padded) for group g.
ConvolutionLayer::Patches ConvolutionLayer::input_patches(const float* x, int64_t i0, int64_t n, int64_t g,
                                                          Workspace& ws) const {
  const int64_t hp = height_ + 2 * pad_.h;
  const int64_t wp = width_ + 2 * pad_.w;
  float* padded = ws.padded.data<float>();
  if (g == 0) pad_images(x, i0, n, channels_, height_, width_, pad_, padded);
  return Patches{padded + g * (channels_ / group_) * hp * wp, channels_ * hp * wp, hp * wp, wp, out_h_,
                 out_w_, kernel_, stride_, dilation_};
}

}  // namespace strata
