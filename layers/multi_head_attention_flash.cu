// The fused attention kernels' launchers (multi_head_attention_flash.h); the
// kernels are in multi_head_attention_flash_kernels.cuh.
#include "layers/multi_head_attention_flash.h"

#include <algorithm>

#include "framework/cuda/runtime.h"
#include "framework/error.h"
#include "layers/multi_head_attention_flash_kernels.cuh"

namespace strata::flash_attention {

namespace {

using namespace kernels;

// Runs body(E{}) for the 16-bit element type of `st`.
template <class Body>
void with_half_element(DType st, const char* what, const Body& body) {
  switch (st) {
    case DType::kBF16: return body(__nv_bfloat16{});
    case DType::kF16: return body(__half{});
    default: break;
  }
  fail<Error>("fused attention ", what, ": tensors stored in ", dtype_name(st), " (bf16 and f16 only)");
}

int checked(int64_t v, const char* what) {
  STRATA_CHECK(v >= 0 && v <= (int64_t{1} << 30), "fused attention: ", what, " ", v, " is too large");
  return static_cast<int>(v);
}

template <class Kernel>
void allow_shared(Kernel kernel, size_t bytes) {
  STRATA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

dim3 grid_of(int64_t items, int64_t t) {
  STRATA_CHECK(items <= 0x7fffffff, "fused attention: ", items, " (sample, head) pairs in one call");
  return dim3(static_cast<unsigned>(items), static_cast<unsigned>((t + kRows - 1) / kRows));
}

}  // namespace

std::string unavailable(int64_t head_dim, int index) {
  if (head_dim < 1 || head_dim > kMaxHeadDim) {
    return "heads of " + std::to_string(head_dim) + " values (the fused kernels take 1 to " +
           std::to_string(kMaxHeadDim) + ")";
  }
  int major = 0, optin = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, index) != cudaSuccess) {
    cudaGetLastError();  // clear it: this is a question, not a failure
    return "no GPU " + std::to_string(index) + " to ask";
  }
  if (major < 8) return "compute capability " + std::to_string(major) + ".x (the fused kernels need 8.0 or later)";
  const int dhp = padded(head_dim);
  const size_t most = std::max({forward_bytes(dhp), backward_kv_bytes(dhp), backward_q_bytes(dhp)});
  if (most > static_cast<size_t>(optin)) {
    return "heads of " + std::to_string(head_dim) + " values need " + std::to_string(most) +
           " bytes of shared memory per block; this GPU allows " + std::to_string(optin);
  }
  return "";
}

void forward(int64_t items, int64_t t, int64_t head_dim, float scale, const void* q, const void* k, const void* v,
             DType st, void* o, float* lse) {
  if (items == 0 || t == 0) return;
  const int ti = checked(t, "T"), dh = checked(head_dim, "head dim"), dhp = padded(head_dim);
  with_half_element(st, "forward", [&](auto e) {
    using E = decltype(e);
    const size_t bytes = forward_bytes(dhp);
    allow_shared(forward_kernel<E>, bytes);
    forward_kernel<E><<<grid_of(items, t), kThreads, bytes, cuda::compute_stream()>>>(
        ti, dh, dhp, scale, static_cast<const E*>(q), static_cast<const E*>(k), static_cast<const E*>(v),
        static_cast<E*>(o), lse);
    STRATA_KERNEL_CHECK();
  });
}

void row_dots(int64_t n, int64_t t, int64_t heads, int64_t head_dim, const void* o, const void* dout, DType st,
              float* dots) {
  const int64_t rows = n * heads * t;
  if (rows == 0) return;
  with_half_element(st, "backward", [&](auto e) {
    using E = decltype(e);
    row_dots_kernel<E><<<cuda::blocks_for(rows), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        n, t, heads, head_dim, static_cast<const E*>(o), static_cast<const E*>(dout), dots);
    STRATA_KERNEL_CHECK();
  });
}

void backward(int64_t items, int64_t t, int64_t head_dim, float scale, const void* q, const void* k, const void* v,
              const void* dout, const float* lse, const float* dots, DType st, void* dq, void* dk, void* dv) {
  if (items == 0 || t == 0) return;
  const int ti = checked(t, "T"), dh = checked(head_dim, "head dim"), dhp = padded(head_dim);
  with_half_element(st, "backward", [&](auto e) {
    using E = decltype(e);
    const E* qe = static_cast<const E*>(q);
    const E* ke = static_cast<const E*>(k);
    const E* ve = static_cast<const E*>(v);
    const E* ge = static_cast<const E*>(dout);
    const size_t kv_bytes = backward_kv_bytes(dhp);
    allow_shared(backward_kv_kernel<E>, kv_bytes);
    backward_kv_kernel<E><<<grid_of(items, t), kThreads, kv_bytes, cuda::compute_stream()>>>(
        ti, dh, dhp, scale, qe, ke, ve, ge, lse, dots, static_cast<E*>(dk), static_cast<E*>(dv));
    STRATA_KERNEL_CHECK();
    const size_t q_bytes = backward_q_bytes(dhp);
    allow_shared(backward_q_kernel<E>, q_bytes);
    backward_q_kernel<E><<<grid_of(items, t), kThreads, q_bytes, cuda::compute_stream()>>>(
        ti, dh, dhp, scale, qe, ke, ve, ge, lse, dots, static_cast<E*>(dq));
    STRATA_KERNEL_CHECK();
  });
}

}  // namespace strata::flash_attention
