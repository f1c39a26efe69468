// The GPU side of layers/loss_layer.h: the one-block total of a loss.
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "layers/loss_layer.h"

namespace strata::cuda {
namespace {

__global__ void loss_total_kernel(int64_t n, const float* terms, const float* valid, float fixed_divisor, float* top,
                                  float* divisor) {
  double total = 0.0, count = 0.0;
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
    total += terms[k];
    if (valid) count += valid[k];
  }
  total = block_sum(total);
  count = block_sum(count);
  if (threadIdx.x == 0) {
    double d = valid ? count : static_cast<double>(fixed_divisor);
    if (d < 1.0) d = 1.0;  // an empty or fully ignored batch gives 0, not NaN
    top[0] = static_cast<float>(total / d);
    divisor[0] = static_cast<float>(d);
  }
}

}  // namespace

void loss_total(int64_t n, const float* terms, const float* valid, float fixed_divisor, float* top, float* divisor) {
  loss_total_kernel<<<1, 1024, 0, compute_stream()>>>(n, terms, valid, fixed_divisor, top, divisor);
  STRATA_KERNEL_CHECK();
}

}  // namespace strata::cuda
