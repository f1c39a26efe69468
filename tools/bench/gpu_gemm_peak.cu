// The GPU's measured matmul peak, the denominator of the MFU figures in
// docs/benchmarks.md: cuBLAS GEMMs of M = N = K = size (default 8192) in the
// math modes strata's precisions use, median of several timed runs.
//
//   strata_bench_gpu_gemm [size] [repeats]
//
// Prints first the device and library versions, {"gpu": name, "cuda_driver":
// ..., "cuda_runtime": ..., "cublas": ..., "cudnn": ...} (versions as the
// libraries report them: 13000 is CUDA 13.0), then one JSON object per mode:
// {"mode": "FP32"|"TF32"|"BF16"|"FP16", "tflops_median": ...}. BF16 and FP16
// take 16-bit inputs and accumulate in fp32, as autocast's GEMMs do.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "framework/cuda/runtime.h"

namespace {

struct Mode {
  const char* name;
  cudaDataType_t input;
  cublasComputeType_t compute;
};

__global__ void init_kernel(float* p, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    p[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f - 0.5f;
  }
}

__global__ void to_bf16_kernel(const float* in, __nv_bfloat16* out, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    out[i] = __float2bfloat16(in[i]);
  }
}

__global__ void to_fp16_kernel(const float* in, __half* out, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    out[i] = __float2half(in[i]);
  }
}

// The GPU's name and the versions of the driver and libraries this program
// runs with, for the benchmark table's header.
void print_versions() {
  cudaDeviceProp prop{};
  int device = 0, driver = 0, runtime = 0, cublas = 0;
  STRATA_CUDA_CHECK(cudaGetDevice(&device));
  STRATA_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  STRATA_CUDA_CHECK(cudaDriverGetVersion(&driver));
  STRATA_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  STRATA_CUBLAS_CHECK(cublasGetVersion(strata::cuda::cublas_handle(), &cublas));
  std::printf("{\"gpu\": \"%s\", \"memory_bytes\": %zu, \"sm\": \"%d.%d\", \"cuda_driver\": %d, "
              "\"cuda_runtime\": %d, \"cublas\": %d, \"cudnn\": %zu}\n",
              prop.name, prop.totalGlobalMem, prop.major, prop.minor, driver, runtime, cublas,
              static_cast<size_t>(cudnnGetVersion()));
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 8192;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 10;
  try {
    using namespace strata::cuda;
    if (device_count() == 0) {
      std::fprintf(stderr, "strata_bench_gpu_gemm: no CUDA device\n");
      return 1;
    }
    print_versions();
    const int64_t count = n * n;
    float *a = nullptr, *b = nullptr, *c = nullptr;
    __nv_bfloat16 *a16 = nullptr, *b16 = nullptr;
    __half *ah = nullptr, *bh = nullptr;
    STRATA_CUDA_CHECK(cudaMalloc(&a, count * sizeof(float)));
    STRATA_CUDA_CHECK(cudaMalloc(&b, count * sizeof(float)));
    STRATA_CUDA_CHECK(cudaMalloc(&c, count * sizeof(float)));
    STRATA_CUDA_CHECK(cudaMalloc(&a16, count * sizeof(__nv_bfloat16)));
    STRATA_CUDA_CHECK(cudaMalloc(&b16, count * sizeof(__nv_bfloat16)));
    STRATA_CUDA_CHECK(cudaMalloc(&ah, count * sizeof(__half)));
    STRATA_CUDA_CHECK(cudaMalloc(&bh, count * sizeof(__half)));
    cudaStream_t stream = compute_stream();
    init_kernel<<<blocks_for(count), kThreadsPerBlock, 0, stream>>>(a, count);
    STRATA_KERNEL_CHECK();
    init_kernel<<<blocks_for(count), kThreadsPerBlock, 0, stream>>>(b, count);
    STRATA_KERNEL_CHECK();
    to_bf16_kernel<<<blocks_for(count), kThreadsPerBlock, 0, stream>>>(a, a16, count);
    STRATA_KERNEL_CHECK();
    to_bf16_kernel<<<blocks_for(count), kThreadsPerBlock, 0, stream>>>(b, b16, count);
    STRATA_KERNEL_CHECK();
    to_fp16_kernel<<<blocks_for(count), kThreadsPerBlock, 0, stream>>>(a, ah, count);
    STRATA_KERNEL_CHECK();
    to_fp16_kernel<<<blocks_for(count), kThreadsPerBlock, 0, stream>>>(b, bh, count);
    STRATA_KERNEL_CHECK();
    cublasHandle_t h = cublas_handle();
    const Mode modes[] = {{"FP32", CUDA_R_32F, CUBLAS_COMPUTE_32F},
                          {"TF32", CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32},
                          {"BF16", CUDA_R_16BF, CUBLAS_COMPUTE_32F},
                          {"FP16", CUDA_R_16F, CUBLAS_COMPUTE_32F}};
    cudaEvent_t start, stop;
    STRATA_CUDA_CHECK(cudaEventCreate(&start));
    STRATA_CUDA_CHECK(cudaEventCreate(&stop));
    const float alpha = 1.0f, beta = 0.0f;
    const int ni = static_cast<int>(n);
    for (const Mode& m : modes) {
      const void* pa = m.input == CUDA_R_16BF ? static_cast<const void*>(a16)
                       : m.input == CUDA_R_16F ? static_cast<const void*>(ah)
                                               : a;
      const void* pb = m.input == CUDA_R_16BF ? static_cast<const void*>(b16)
                       : m.input == CUDA_R_16F ? static_cast<const void*>(bh)
                                               : b;
      auto gemm = [&] {
        STRATA_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &alpha, pa, m.input, ni, pb,
                                         m.input, ni, &beta, c, CUDA_R_32F, ni, m.compute, CUBLAS_GEMM_DEFAULT));
      };
      for (int w = 0; w < 3; ++w) gemm();
      std::vector<double> tflops;
      for (int r = 0; r < repeats; ++r) {
        STRATA_CUDA_CHECK(cudaEventRecord(start, stream));
        gemm();
        STRATA_CUDA_CHECK(cudaEventRecord(stop, stream));
        STRATA_CUDA_CHECK(cudaEventSynchronize(stop));
        float ms = 0.0f;
        STRATA_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        tflops.push_back(2.0 * static_cast<double>(n) * n * n / (ms * 1e-3) / 1e12);
      }
      std::sort(tflops.begin(), tflops.end());
      std::printf("{\"mode\": \"%s\", \"size\": %lld, \"tflops_median\": %.2f, \"tflops_max\": %.2f}\n", m.name,
                  static_cast<long long>(n), tflops[tflops.size() / 2], tflops.back());
    }
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    cudaFree(a16);
    cudaFree(b16);
    cudaFree(ah);
    cudaFree(bh);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata_bench_gpu_gemm: %s\n", e.what());
    return 1;
  }
  return 0;
}
