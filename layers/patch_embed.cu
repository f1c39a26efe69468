// PatchEmbed on the GPU, as patch_embed.cpp: the patches are gathered into a
// [N * T, C * P * P] matrix (one thread per value) and projected with one
// cuBLAS GEMM; backward scatters the patch gradients back. Patches tile the
// image without overlap, so the scatter is a permutation that writes every
// input gradient once.
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "layers/patch_embed.h"

namespace strata {
namespace {

struct PatchGeom {
  int64_t channels, height, width, patch;
};

// The image offset of element (row, col) of the patch matrix.
__device__ int64_t image_offset(const PatchGeom& g, int64_t row, int64_t col) {
  const int64_t P = g.patch, gh = g.height / P, gw = g.width / P;
  const int64_t px = row % gw, py = (row / gw) % gh, n = row / (gw * gh);
  const int64_t kx = col % P, ky = (col / P) % P, c = col / (P * P);
  return ((n * g.channels + c) * g.height + py * P + ky) * g.width + px * P + kx;
}

__global__ void gather_patches(int64_t total, PatchGeom g, const float* x, float* patches) {
  const int64_t k = g.channels * g.patch * g.patch;
  STRATA_CUDA_LOOP(i, total) patches[i] = x[image_offset(g, i / k, i % k)];
}

__global__ void scatter_patches(int64_t total, PatchGeom g, const float* dpatches, float* dx) {
  const int64_t k = g.channels * g.patch * g.patch;
  STRATA_CUDA_LOOP(i, total) dx[image_offset(g, i / k, i % k)] = dpatches[i];
}

}  // namespace

void PatchEmbedLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  const int64_t tokens = (h_ / patch_) * (w_ / patch_);
  const int64_t m = n_ * tokens, k = channels_ * patch_ * patch_, d = num_output_;
  Tensor kept_patches = patch_matrix(kept(kept_bytes()));
  if (m == 0) return;
  float* patches = kept_patches.device_data<float>();
  cudaStream_t s = cuda::compute_stream();
  const PatchGeom g{channels_, h_, w_, patch_};
  gather_patches<<<cuda::blocks_for(m * k), cuda::kThreadsPerBlock, 0, s>>>(
      m * k, g, bottom[0]->data.device_data<float>(), patches);
  STRATA_KERNEL_CHECK();
  float* y = top[0]->data.device_data<float>();
  cuda::gemm(Transpose::kNo, Transpose::kYes, m, d, k, 1.0f, patches, param(0).data.device_data<float>(), 0.0f, y);
  cuda::add_row_bias(m, d, param(1).data.device_data<float>(), y);
}

void PatchEmbedLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                    const BlobVec& bottom) {
  const Tensor kept_patches = patch_matrix(kept(kept_bytes()));  // as forward left it
  const int64_t m = kept_patches.dim(0), k = kept_patches.dim(1), d = num_output_;
  // A zero batch adds nothing to the parameter gradients and has no input gradient.
  if (m == 0) return;
  const float* dy = top[0]->diff.device_data<float>();
  cuda::gemm(Transpose::kYes, Transpose::kNo, d, k, m, 1.0f, dy, kept_patches.device_data<float>(), 1.0f,
             param(0).diff.device_data<float>());
  cuda::column_sums(m, d, dy, 1.0f, param(1).diff.device_data<float>());
  if (!propagate_down[0]) return;
  float* dpatches = patch_matrix(scratch(kept_bytes())).device_data<float>();
  cuda::gemm(Transpose::kNo, Transpose::kNo, m, k, d, 1.0f, dy, param(0).data.device_data<float>(), 0.0f, dpatches);
  const PatchGeom g{channels_, h_, w_, patch_};
  scatter_patches<<<cuda::blocks_for(m * k), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      m * k, g, dpatches, bottom[0]->diff.device_data<float>());
  STRATA_KERNEL_CHECK();
}

}  // namespace strata
