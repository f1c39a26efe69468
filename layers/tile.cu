// Tile on the GPU: one thread per top element forward, one per bottom
// element backward (a gather over its copies), with layers/tile.h's formulas.
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "layers/tile.h"

namespace strata {

namespace {

__global__ void tile_forward_kernel(int64_t n, int64_t inner, int64_t tiles, const float* x, float* y) {
  STRATA_CUDA_LOOP(t, n) y[t] = x[tile_source(t, inner, tiles)];
}

__global__ void tile_backward_kernel(int64_t n, int64_t inner, int64_t tiles, const float* dy, float* dx) {
  STRATA_CUDA_LOOP(j, n) dx[j] = tile_grad_at(j, inner, tiles, dy);
}

}  // namespace

void TileLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  const int64_t n = top[0]->numel();
  if (n == 0) return;
  tile_forward_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      n, inner_, tiles_, bottom[0]->data.device_data<float>(), top[0]->data.device_data<float>());
  STRATA_KERNEL_CHECK();
}

void TileLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  const int64_t n = bottom[0]->numel();
  if (!propagate_down[0] || n == 0) return;
  tile_backward_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      n, inner_, tiles_, top[0]->diff.device_data<float>(), bottom[0]->diff.device_data<float>());
  STRATA_KERNEL_CHECK();
}

}  // namespace strata
