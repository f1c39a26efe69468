// Internal to the Convolution layer (layers/convolution/convolution.cpp): on AVX-512 CPUs
// its GEMMs take their image-patch operand straight from the image
// (gemm_pack_b), so no im2col buffer is written and read back, and the input
// gradient of a stride-1 convolution is computed as a convolution of the top
// gradient with the flipped kernel instead of through col2im. This file packs
// those patches into the GEMM's B panels; convolution_patches.cpp also holds
// the layer's members on that path (pad_images, input_patches,
// multiply_patches).
#pragma once

#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__)
#define STRATA_CONV_PATCHES 1
#endif

namespace strata {
namespace conv_patches {

// Whether the patch packers run: this build has them and the CPU path
// (framework/cpu/cpu_isa.h) is AVX-512.
bool use_avx512();

// Sum of n floats (independent partial sums: a plain loop is one long
// dependency chain).
float row_sum(const float* p, int64_t n);

// A chunk of zero-padded images seen through a convolution's windows (the
// padding is already in the images, so every window lies inside). Patch row
// k = (c, ki, kj); output pixel j = (image, oh, ow) of the chunk.
struct PatchGeometry {
  const float* x;        // the chunk's first padded image, at the group's first channel
  int64_t image_stride;  // floats from one image to the next
  int64_t plane;         // floats per channel
  int64_t width;         // padded row length
  int64_t out_h, out_w;
  int64_t kh, kw, sh, sw, dh, dw;

  // Offset of patch row k = (c, ki, kj) from its pixel's window origin.
  int64_t row_offset(int64_t k) const {
    const int64_t taps = kh * kw;
    return k / taps * plane + (k % taps / kw) * dh * width + (k % kw) * dw;
  }
};

#ifdef STRATA_CONV_PATCHES
// gemm_pack_b packers over the patches of g (see GemmPackB in math.h).
// Across: op(B)[k][j] = patch row k of pixel j (forward, and the stride-1
// input gradient). Down: op(B)[k][j] = patch row j of pixel k (the weight
// gradient). Require use_avx512(); safe to call from several threads.
void pack_patches_across(const PatchGeometry& g, int64_t k0, int64_t kc, int64_t j0, int64_t nc, float* dst);
void pack_patches_down(const PatchGeometry& g, int64_t k0, int64_t kc, int64_t j0, int64_t nc, float* dst);
#endif

}  // namespace conv_patches
}  // namespace strata
