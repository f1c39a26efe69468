// cuda::cast_elements (framework/cuda/device_api.h): f32, f16 and bf16
// converted element by element on the device, rounding to the nearest (ties
// to even) as framework/dtype.h does on the host, so that a net that stores
// its activations in a reduced dtype gives the same bits on both sides.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "framework/cuda/device_api.h"
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "framework/error.h"

namespace strata::cuda {

namespace {

__device__ __forceinline__ float load_f32(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load_f32(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ float load_f32(const __half* p, int64_t i) { return __half2float(p[i]); }

__device__ __forceinline__ void store_f32(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store_f32(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store_f32(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }

template <typename From, typename To>
__global__ void cast_kernel(int64_t n, const From* x, To* y) {
  STRATA_CUDA_LOOP(i, n) store_f32(y, i, load_f32(x, i));
}

template <typename From, typename To>
void launch(int64_t n, const void* x, void* y) {
  cast_kernel<From, To><<<blocks_for(n), kThreadsPerBlock, 0, compute_stream()>>>(n, static_cast<const From*>(x),
                                                                                   static_cast<To*>(y));
  STRATA_KERNEL_CHECK();
}

template <typename From>
void launch_to(DType to, int64_t n, const void* x, void* y) {
  switch (to) {
    case DType::kF32: return launch<From, float>(n, x, y);
    case DType::kBF16: return launch<From, __nv_bfloat16>(n, x, y);
    case DType::kF16: return launch<From, __half>(n, x, y);
    default: break;
  }
  STRATA_CHECK(false, "cast_elements: cannot convert to ", dtype_name(to), " (f32, f16 and bf16 only)");
}

}  // namespace

void cast_elements(void* dst, DType to, const void* src, DType from, int64_t n, int index) {
  if (n <= 0) return;
  DeviceGuard g(index);
  switch (from) {
    case DType::kF32: return launch_to<float>(to, n, src, dst);
    case DType::kBF16: return launch_to<__nv_bfloat16>(to, n, src, dst);
    case DType::kF16: return launch_to<__half>(to, n, src, dst);
    default: break;
  }
  STRATA_CHECK(false, "cast_elements: cannot convert from ", dtype_name(from), " (f32, f16 and bf16 only)");
}

}  // namespace strata::cuda
