// Device kernels behind Tensor::fill on a CUDA tensor.
#include "framework/cuda/device_api.h"
#include "framework/cuda/runtime.h"

namespace strata::cuda {

namespace {

__global__ void fill_kernel(float* p, int64_t n, float value) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    p[i] = value;
  }
}

}  // namespace

void fill_f32(float* ptr, int64_t n, float value, int index) {
  if (n <= 0) return;
  const int prev = current_device();
  if (prev != index) set_device(index);
  fill_kernel<<<blocks_for(n), kThreadsPerBlock, 0, compute_stream()>>>(ptr, n, value);
  const cudaError_t err = cudaGetLastError();
  if (prev != index) set_device(prev);
  STRATA_CUDA_CHECK(err);
}

}  // namespace strata::cuda
