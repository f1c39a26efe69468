// LRN on the GPU: one thread per element, each summing its own window with
// the formulas of layers/lrn.h (those the CPU runs), so no thread writes
// what another reads in the same kernel.
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "layers/lrn.h"

namespace strata {

namespace {

__global__ void lrn_forward_kernel(LrnGeometry g, int64_t n, const float* x, float* s, float* y) {
  STRATA_CUDA_LOOP(i, n) lrn_forward_at(g, i, x, s, y);
}

__global__ void lrn_backward_kernel(LrnGeometry g, int64_t n, const float* x, const float* y, const float* s,
                                    const float* dy, float* dx) {
  STRATA_CUDA_LOOP(i, n) dx[i] = lrn_backward_at(g, i, x, y, s, dy);
}

}  // namespace

void LRNLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  cuda::ensure_on_device(scale_, bottom[0]->shape(), DType::kF32, device());
  if (count_ == 0) return;
  lrn_forward_kernel<<<cuda::blocks_for(count_), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      geom_, count_, bottom[0]->data.device_data<float>(), scale_.device_data<float>(),
      top[0]->data.device_data<float>());
  STRATA_KERNEL_CHECK();
}

void LRNLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  if (!propagate_down[0] || count_ == 0) return;
  lrn_backward_kernel<<<cuda::blocks_for(count_), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      geom_, count_, bottom[0]->data.device_data<float>(), top[0]->data.device_data<float>(),
      scale_.device_data<float>(), top[0]->diff.device_data<float>(), bottom[0]->diff.device_data<float>());
  STRATA_KERNEL_CHECK();
}

}  // namespace strata
