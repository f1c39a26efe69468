// One element of a blob stored in f32, bf16 or f16, on the device: widened
// to f32 on load, rounded to the nearest even on store, as the host's
// conversions (framework/dtype.h) and cuda::cast_elements round. For .cu
// files: the kernels of layers that take their storage dtype
// (Layer::takes_storage) and of framework/cuda/stored_math.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "framework/dtype.h"
#include "framework/error.h"

namespace strata::cuda {

__device__ __forceinline__ float load_element(float v) { return v; }
__device__ __forceinline__ float load_element(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float load_element(__half v) { return __half2float(v); }

template <class T> __device__ __forceinline__ T store_element(float f);
template <> __device__ __forceinline__ float store_element<float>(float f) { return f; }
template <> __device__ __forceinline__ __nv_bfloat16 store_element<__nv_bfloat16>(float f) {
  return __float2bfloat16_rn(f);
}
template <> __device__ __forceinline__ __half store_element<__half>(float f) { return __float2half_rn(f); }

// Calls body(T{}) with the device element type of `dtype` (float,
// __nv_bfloat16, __half); Error naming `what` for another dtype.
template <class Body>
void with_device_element(DType dtype, const char* what, const Body& body) {
  switch (dtype) {
    case DType::kF32: return body(float{});
    case DType::kBF16: return body(__nv_bfloat16{});
    case DType::kF16: return body(__half{});
    default: break;
  }
  fail<Error>(what, ": blobs stored in ", dtype_name(dtype), " (f32, bf16 and f16 only)");
}

}  // namespace strata::cuda
