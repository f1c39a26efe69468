// The CUDA runtime of strata, as layers and solvers see it: one check macro
// per library family, the current device's streams and library handles, and
// scratch memory from the caching allocator. Only compiled with CUDA
// (STRATA_WITH_CUDA); CPU-only code never includes this header.
//
// Streams: one per role on each device. Layers run on compute_stream();
// the data layer's host-to-device copies run on copy_stream() and
// communication on comm_stream(), with events between them.
#pragma once

#ifdef STRATA_WITH_CUDA

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace strata::cuda {

// Throws strata::Error: "<library> call failed: <expr> at <file>:<line>: <library's error string>".
[[noreturn]] void throw_library_error(const char* library, const char* expr, const char* file,
                                      int line, const std::string& detail);
const char* cublas_status_string(cublasStatus_t status);

}  // namespace strata::cuda

#define STRATA_GPU_CHECK_(library, ok, detail_fn, expr)                                      \
  do {                                                                                       \
    auto strata_status_ = (expr);                                                            \
    if (!(ok)) ::strata::cuda::throw_library_error(library, #expr, __FILE__, __LINE__,       \
                                                   detail_fn(strata_status_));               \
  } while (0)

#define STRATA_CUDA_CHECK(expr) \
  STRATA_GPU_CHECK_("CUDA", strata_status_ == cudaSuccess, cudaGetErrorString, expr)
#define STRATA_CUBLAS_CHECK(expr)                                                 \
  STRATA_GPU_CHECK_("cuBLAS", strata_status_ == CUBLAS_STATUS_SUCCESS,            \
                    ::strata::cuda::cublas_status_string, expr)
#define STRATA_CUDNN_CHECK(expr) \
  STRATA_GPU_CHECK_("cuDNN", strata_status_ == CUDNN_STATUS_SUCCESS, cudnnGetErrorString, expr)
// After every kernel launch.
#define STRATA_KERNEL_CHECK() STRATA_CUDA_CHECK(cudaGetLastError())

namespace strata::cuda {

// Device of the calling thread (cudaSetDevice), set by the Net / tools.
int current_device();
void set_device(int index);
int device_count();  // 0 when no GPU or no driver; never throws

// Makes device `index` current for a scope and restores the previous device
// on exit. The current device belongs to the calling thread, and library
// entry points may be called from any thread, so every function that works
// on a device it was given (not the current one) opens one of these.
// The constructor throws strata::Error when the switch fails; the destructor
// never throws (a failed switch back stays in cudaGetLastError(), where the
// next launch check reports it).
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool switched_ = false;
};

// Streams and handles of the current device, created on first use.
cudaStream_t compute_stream();
cudaStream_t copy_stream();
cudaStream_t comm_stream();
cublasHandle_t cublas_handle();  // bound to compute_stream()
cublasLtHandle_t cublaslt_handle();  // cuBLASLt (its calls name their stream)
cudnnHandle_t cudnn_handle();    // bound to compute_stream()

// Whether the current device's compute stream is being captured into a step
// graph (device_api.h): host work a replay would skip is left to
// Layer::before_replay.
bool capturing();

// Scratch memory (cuDNN workspaces, reductions) from the caching allocator,
// valid until the next call on this device; it grows, never shrinks.
void* workspace(size_t bytes);

// Launch geometry for element-wise kernels.
constexpr int kThreadsPerBlock = 256;
inline unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreadsPerBlock - 1) / kThreadsPerBlock;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 32 ? 65535 * 32 : b));
}

}  // namespace strata::cuda

#endif  // STRATA_WITH_CUDA
