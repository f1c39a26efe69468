#include "framework/cuda/math.h"

#include <atomic>
#include <cmath>
#include <limits>

#include "framework/cuda/elements.cuh"
#include "framework/cuda/runtime.h"
#include "framework/cuda/stored_math.h"
#include "framework/error.h"

namespace strata::cuda {

namespace {

std::atomic<MathMode> g_math_mode{MathMode::kFP32};

cublasComputeType_t cublas_compute_type() {
  switch (math_mode()) {
    case MathMode::kTF32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case MathMode::kBF16: return CUBLAS_COMPUTE_32F_FAST_16BF;
    case MathMode::kFP32: break;
  }
  return CUBLAS_COMPUTE_32F;
}

int checked_int(int64_t v, const char* what) {
  STRATA_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(), "cuBLAS ", what, " ", v,
               " does not fit in an int; split the operation");
  return static_cast<int>(v);
}

cublasOperation_t op(Transpose t) { return t == Transpose::kYes ? CUBLAS_OP_T : CUBLAS_OP_N; }

__global__ void fill_kernel(int64_t n, float value, float* x) {
  STRATA_CUDA_LOOP(i, n) x[i] = value;
}

// The loss top's gradient with the loss scale the device keeps (as the host's w * float(scale)).
__global__ void fill_scaled_kernel(int64_t n, float weight, const double* scale, float* x) {
  const float value = weight * static_cast<float>(*scale);
  STRATA_CUDA_LOOP(i, n) x[i] = value;
}

__global__ void add_weighted_loss_kernel(double* sum, const float* x, float weight) {
  *sum += static_cast<double>(weight) * static_cast<double>(*x);
}

__global__ void pack_step_results_kernel(float* out, const double* loss, float share, float stop) {
  out[0] = static_cast<float>(*loss) * share;
  out[1] = stop;
}

__global__ void unpack_step_results_kernel(double* loss, double* stop, const float* in) {
  *loss = static_cast<double>(in[0]);
  *stop = static_cast<double>(in[1]);
}

__global__ void axpy_kernel(int64_t n, float alpha, const float* x, float* y) {
  STRATA_CUDA_LOOP(i, n) y[i] += alpha * x[i];
}

__global__ void scale_kernel(int64_t n, float alpha, float* x) {
  STRATA_CUDA_LOOP(i, n) x[i] *= alpha;
}

__global__ void add_row_bias_kernel(int64_t rows, int64_t cols, const float* b, Activation act, float* y) {
  STRATA_CUDA_LOOP(i, rows * cols) y[i] = act(y[i] + b[i % cols]);
}

// One thread per column, rows summed in order: coalesced across threads.
__global__ void column_sums_kernel(int64_t rows, int64_t cols, const float* a, float beta, float* y) {
  STRATA_CUDA_LOOP(c, cols) {
    double s = 0.0;
    for (int64_t r = 0; r < rows; ++r) s += a[r * cols + c];
    y[c] = static_cast<float>(s) + (beta == 0.0f ? 0.0f : beta * y[c]);
  }
}

// One block per channel; threads stride over (outer, inner).
__global__ void channel_sums_kernel(int64_t outer, int64_t channels, int64_t inner, const float* x,
                                    const float* w, float beta, float* y) {
  const int64_t c = blockIdx.x;
  const int64_t m = outer * inner;
  double s = 0.0;
  for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
    const int64_t o = k / inner, i = k - o * inner;
    const int64_t at = (o * channels + c) * inner + i;
    s += w ? static_cast<double>(x[at]) * w[at] : static_cast<double>(x[at]);
  }
  s = block_sum(s);
  if (threadIdx.x == 0) y[c] = static_cast<float>(s) + (beta == 0.0f ? 0.0f : beta * y[c]);
}


// One thread per (outer, inner) position; threads of a warp take adjacent
// inner positions, so reads are coalesced when inner > 1. Each element is read
// before the same thread writes it, so y may equal x. T: the blobs' element
// (f32, or bf16/f16 widened; each output rounded once).
template <class T>
__global__ void softmax_position_kernel(int64_t outer, int64_t channels, int64_t inner, const T* x, T* y,
                                        float* row_max, float* row_sum) {
  STRATA_CUDA_LOOP(pos, outer * inner) {
    const int64_t o = pos / inner, i = pos - o * inner;
    const T* xo = x + o * channels * inner + i;
    T* yo = y + o * channels * inner + i;
    float mx = load_element(xo[0]);
    for (int64_t c = 1; c < channels; ++c) mx = fmaxf(mx, load_element(xo[c * inner]));
    float sum = 0.0f;
    for (int64_t c = 0; c < channels; ++c) sum += expf(load_element(xo[c * inner]) - mx);
    for (int64_t c = 0; c < channels; ++c) {
      yo[c * inner] = store_element<T>(expf(load_element(xo[c * inner]) - mx) / sum);
    }
    if (row_max) row_max[pos] = mx;
    if (row_sum) row_sum[pos] = sum;
  }
}

// inner == 1 with many channels: one block per row.
template <class T>
__global__ void softmax_row_kernel(int64_t channels, const T* x, T* y, float* row_max, float* row_sum) {
  const int64_t row = blockIdx.x;
  const T* xr = x + row * channels;
  T* yr = y + row * channels;
  float mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < channels; c += blockDim.x) mx = fmaxf(mx, load_element(xr[c]));
  mx = block_reduce(mx, MaxOp{}, -INFINITY);
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < channels; c += blockDim.x) sum += expf(load_element(xr[c]) - mx);
  sum = block_sum(sum);
  for (int64_t c = threadIdx.x; c < channels; c += blockDim.x) {
    yr[c] = store_element<T>(expf(load_element(xr[c]) - mx) / sum);
  }
  if (threadIdx.x == 0) {
    if (row_max) row_max[row] = mx;
    if (row_sum) row_sum[row] = sum;
  }
}

template <class T>
__global__ void softmax_backward_position_kernel(int64_t outer, int64_t channels, int64_t inner, const T* y,
                                                 const T* dy, T* dx) {
  STRATA_CUDA_LOOP(pos, outer * inner) {
    const int64_t o = pos / inner, i = pos - o * inner;
    const int64_t base = o * channels * inner + i;
    float dot = 0.0f;
    for (int64_t c = 0; c < channels; ++c) {
      dot += load_element(dy[base + c * inner]) * load_element(y[base + c * inner]);
    }
    for (int64_t c = 0; c < channels; ++c) {
      const int64_t k = base + c * inner;
      dx[k] = store_element<T>(load_element(y[k]) * (load_element(dy[k]) - dot));
    }
  }
}

template <class T>
__global__ void softmax_backward_row_kernel(int64_t channels, const T* y, const T* dy, T* dx) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * channels;
  float dot = 0.0f;
  for (int64_t c = threadIdx.x; c < channels; c += blockDim.x) {
    dot += load_element(dy[base + c]) * load_element(y[base + c]);
  }
  dot = block_sum(dot);
  for (int64_t c = threadIdx.x; c < channels; c += blockDim.x) {
    dx[base + c] = store_element<T>(load_element(y[base + c]) * (load_element(dy[base + c]) - dot));
  }
}

// Rows this long or longer get a block each.
constexpr int64_t kRowKernelChannels = 128;
constexpr int kRowThreads = 256;

}  // namespace

void set_math_mode(MathMode mode) { g_math_mode.store(mode); }
MathMode math_mode() { return g_math_mode.load(); }

const char* math_mode_name(MathMode mode) {
  switch (mode) {
    case MathMode::kTF32: return "TF32";
    case MathMode::kBF16: return "BF16";
    case MathMode::kFP32: break;
  }
  return "FP32";
}

cudnnMathType_t cudnn_math_type() {
  // FMA only for FP32 so results match the CPU to rounding; DEFAULT_MATH
  // lets cuDNN use TF32 tensor cores for fp32 data.
  return math_mode() == MathMode::kFP32 ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so cuBLAS
// gets the operands swapped and the dimensions N, M.
void gemm(Transpose ta, Transpose tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          const float* B, float beta, float* C) {
  gemm_strided_batched(ta, tb, M, N, K, alpha, A, 0, B, 0, beta, C, 0, 1);
}

void gemm_strided_batched(Transpose ta, Transpose tb, int64_t M, int64_t N, int64_t K, float alpha,
                          const float* A, int64_t stride_a, const float* B, int64_t stride_b, float beta,
                          float* C, int64_t stride_c, int64_t batch) {
  if (M == 0 || N == 0 || batch == 0) return;
  if (K == 0) {  // op(A) op(B) is empty: C = beta * C
    for (int64_t i = 0; i < batch; ++i) {
      if (beta == 0.0f) {
        fill(M * N, 0.0f, C + i * stride_c);
      } else if (beta != 1.0f) {
        scale(M * N, beta, C + i * stride_c);
      }
    }
    return;
  }
  const int m = checked_int(M, "M"), n = checked_int(N, "N"), k = checked_int(K, "K");
  const int b = checked_int(batch, "batch");
  const int lda = ta == Transpose::kNo ? (k > 0 ? k : 1) : m;
  const int ldb = tb == Transpose::kNo ? n : (k > 0 ? k : 1);
  cublasHandle_t h = cublas_handle();
  if (b == 1) {
    STRATA_CUBLAS_CHECK(cublasGemmEx(h, op(tb), op(ta), n, m, k, &alpha, B, CUDA_R_32F, ldb, A, CUDA_R_32F, lda,
                                     &beta, C, CUDA_R_32F, n, cublas_compute_type(), CUBLAS_GEMM_DEFAULT));
  } else {
    STRATA_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, op(tb), op(ta), n, m, k, &alpha, B, CUDA_R_32F, ldb,
                                                   stride_b, A, CUDA_R_32F, lda, stride_a, &beta, C, CUDA_R_32F,
                                                   n, stride_c, b, cublas_compute_type(), CUBLAS_GEMM_DEFAULT));
  }
}

void fill(int64_t n, float value, float* x) {
  if (n <= 0) return;
  if (value == 0.0f) {
    STRATA_CUDA_CHECK(cudaMemsetAsync(x, 0, static_cast<size_t>(n) * sizeof(float), compute_stream()));
    return;
  }
  fill_kernel<<<blocks_for(n), kThreadsPerBlock, 0, compute_stream()>>>(n, value, x);
  STRATA_KERNEL_CHECK();
}

void fill_scaled(int64_t n, float weight, const double* scale, float* x) {
  if (n <= 0) return;
  fill_scaled_kernel<<<blocks_for(n), kThreadsPerBlock, 0, compute_stream()>>>(n, weight, scale, x);
  STRATA_KERNEL_CHECK();
}

void add_weighted_loss(double* sum, const float* x, float weight) {
  add_weighted_loss_kernel<<<1, 1, 0, compute_stream()>>>(sum, x, weight);
  STRATA_KERNEL_CHECK();
}

void pack_step_results(float* out, const double* loss, float share, float stop) {
  pack_step_results_kernel<<<1, 1, 0, compute_stream()>>>(out, loss, share, stop);
  STRATA_KERNEL_CHECK();
}

void unpack_step_results(double* loss, double* stop, const float* in) {
  unpack_step_results_kernel<<<1, 1, 0, compute_stream()>>>(loss, stop, in);
  STRATA_KERNEL_CHECK();
}

void copy(int64_t n, const float* x, float* y) {
  if (n <= 0 || x == y) return;
  STRATA_CUDA_CHECK(cudaMemcpyAsync(y, x, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice,
                                    compute_stream()));
}

void axpy(int64_t n, float alpha, const float* x, float* y) {
  if (n <= 0) return;
  axpy_kernel<<<blocks_for(n), kThreadsPerBlock, 0, compute_stream()>>>(n, alpha, x, y);
  STRATA_KERNEL_CHECK();
}

void scale(int64_t n, float alpha, float* x) {
  if (n <= 0) return;
  scale_kernel<<<blocks_for(n), kThreadsPerBlock, 0, compute_stream()>>>(n, alpha, x);
  STRATA_KERNEL_CHECK();
}

void add_row_bias(int64_t rows, int64_t cols, const float* b, float* y, Activation act) {
  if (rows * cols <= 0) return;
  add_row_bias_kernel<<<blocks_for(rows * cols), kThreadsPerBlock, 0, compute_stream()>>>(rows, cols, b, act, y);
  STRATA_KERNEL_CHECK();
}

void column_sums(int64_t rows, int64_t cols, const float* A, float beta, float* y) {
  if (cols <= 0) return;
  column_sums_kernel<<<blocks_for(cols), kThreadsPerBlock, 0, compute_stream()>>>(rows, cols, A, beta, y);
  STRATA_KERNEL_CHECK();
}

void channel_sums(int64_t outer, int64_t channels, int64_t inner, const float* x, const float* w, float beta,
                  float* y) {
  if (channels <= 0) return;
  STRATA_CHECK(channels <= std::numeric_limits<int>::max(), "channel_sums: too many channels (", channels, ")");
  channel_sums_kernel<<<static_cast<unsigned>(channels), kThreadsPerBlock, 0, compute_stream()>>>(
      outer, channels, inner, x, w, beta, y);
  STRATA_KERNEL_CHECK();
}

namespace {

template <class T>
void softmax_forward_as(int64_t outer, int64_t channels, int64_t inner, const T* x, T* y, float* row_max,
                        float* row_sum) {
  const int64_t positions = outer * inner;
  if (positions == 0 || channels == 0) return;
  if (inner == 1 && channels >= kRowKernelChannels && outer <= std::numeric_limits<int>::max()) {
    softmax_row_kernel<T><<<static_cast<unsigned>(outer), kRowThreads, 0, compute_stream()>>>(channels, x, y, row_max,
                                                                                               row_sum);
  } else {
    softmax_position_kernel<T><<<blocks_for(positions), kThreadsPerBlock, 0, compute_stream()>>>(
        outer, channels, inner, x, y, row_max, row_sum);
  }
  STRATA_KERNEL_CHECK();
}

template <class T>
void softmax_backward_as(int64_t outer, int64_t channels, int64_t inner, const T* y, const T* dy, T* dx) {
  const int64_t positions = outer * inner;
  if (positions == 0 || channels == 0) return;
  if (inner == 1 && channels >= kRowKernelChannels && outer <= std::numeric_limits<int>::max()) {
    softmax_backward_row_kernel<T><<<static_cast<unsigned>(outer), kRowThreads, 0, compute_stream()>>>(channels, y, dy,
                                                                                                        dx);
  } else {
    softmax_backward_position_kernel<T><<<blocks_for(positions), kThreadsPerBlock, 0, compute_stream()>>>(
        outer, channels, inner, y, dy, dx);
  }
  STRATA_KERNEL_CHECK();
}

}  // namespace

void softmax_channels(int64_t outer, int64_t channels, int64_t inner, const float* x, float* y, float* row_max,
                      float* row_sum) {
  softmax_forward_as<float>(outer, channels, inner, x, y, row_max, row_sum);
}

void softmax_channels_backward(int64_t outer, int64_t channels, int64_t inner, const float* y, const float* dy,
                               float* dx) {
  softmax_backward_as<float>(outer, channels, inner, y, dy, dx);
}

void softmax_channels_stored(int64_t outer, int64_t channels, int64_t inner, const void* x, void* y, DType dtype) {
  with_device_element(dtype, "softmax_channels_stored", [&](auto e) {
    using T = decltype(e);
    softmax_forward_as<T>(outer, channels, inner, static_cast<const T*>(x), static_cast<T*>(y), nullptr, nullptr);
  });
}

void softmax_channels_backward_stored(int64_t outer, int64_t channels, int64_t inner, const void* y, const void* dy,
                                      void* dx, DType dtype) {
  with_device_element(dtype, "softmax_channels_backward_stored", [&](auto e) {
    using T = decltype(e);
    softmax_backward_as<T>(outer, channels, inner, static_cast<const T*>(y), static_cast<const T*>(dy),
                           static_cast<T*>(dx));
  });
}

DeferredIndexCheck::~DeferredIndexCheck() {
  // Destructors must not throw: errors here are ignored.
  for (cudaEvent_t e : {done_, replayed_}) {
    if (!e) continue;
    cudaEventSynchronize(e);
    cudaEventDestroy(e);
  }
  if (device_) cudaFree(device_);
  if (host_) cudaFreeHost(host_);
}

int64_t DeferredIndexCheck::previous() {
  if (!pending_ || capturing()) return -1;
  STRATA_CUDA_CHECK(cudaEventSynchronize(last_event()));
  pending_ = false;
  return *host_ == ~0ull ? -1 : static_cast<int64_t>(*host_);
}

unsigned long long* DeferredIndexCheck::arm() {
  if (!device_) {
    // Once per layer, 8 bytes: not worth the caching allocator.
    STRATA_CUDA_CHECK(cudaMalloc(&device_, sizeof(unsigned long long)));
    STRATA_CUDA_CHECK(cudaMallocHost(&host_, sizeof(unsigned long long)));
    STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&replayed_, cudaEventDisableTiming));
  }
  STRATA_CUDA_CHECK(cudaMemsetAsync(device_, 0xFF, sizeof(unsigned long long), compute_stream()));
  return device_;
}

int64_t DeferredIndexCheck::before_replay() {
  int64_t found = -1;
  if (pending_) {
    STRATA_CUDA_CHECK(cudaEventSynchronize(last_event()));
    found = *host_ == ~0ull ? -1 : static_cast<int64_t>(*host_);
  }
  // A replay records the graph's event (once a capture put it there; the
  // capture about to run sets it itself).
  pending_ = graph_records_;
  last_replayed_ = graph_records_;
  return found;
}

void DeferredIndexCheck::record() {
  STRATA_CUDA_CHECK(cudaMemcpyAsync(host_, device_, sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                                    compute_stream()));
  if (capturing()) {
    // A node of the graph: every launch records it, and the host waits on
    // it as on an eager record (before_replay, or previous() when a failed
    // capture is run eagerly: done_ was not touched).
    STRATA_CUDA_CHECK(cudaEventRecordWithFlags(replayed_, compute_stream(), cudaEventRecordExternal));
    pending_ = true;
    last_replayed_ = true;
    graph_records_ = true;
    return;
  }
  STRATA_CUDA_CHECK(cudaEventRecord(done_, compute_stream()));
  pending_ = true;
  last_replayed_ = false;
}

void ensure_on_device(Tensor& t, const Shape& shape, DType dtype, Device device) {
  if (t.device() == device && t.dtype() == dtype) {
    t.resize(shape);
  } else {
    t = Tensor(shape, dtype, device);
  }
}

}  // namespace strata::cuda
