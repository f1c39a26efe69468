// GPU numerical kernels shared by the layers' CUDA code: GEMM through cuBLAS
// with the same row-major convention as framework/cpu/math.h, the math mode that
// cuBLAS and cuDNN honour (FP32, TF32 or BF16 tensor cores on fp32 storage),
// and the few vector operations and reductions every layer needs. Everything
// runs on compute_stream() of the current device; pointers are device
// pointers. Only compiled with CUDA (STRATA_WITH_CUDA).
#pragma once

#ifdef STRATA_WITH_CUDA

#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>

#include "framework/cpu/math.h"
#include "framework/tensor.h"

namespace strata::cuda {

// How fp32 GEMMs and convolutions may compute:
//   kFP32: plain fp32 FMA (matches the CPU to rounding);
//   kTF32: tensor cores with TF32 inputs (10-bit mantissa), fp32 accumulation;
//   kBF16: cuBLAS GEMMs on tensor cores with BF16 inputs and fp32
//          accumulation; cuDNN has no BF16 path for fp32 tensors, so
//          convolutions use TF32 in this mode.
// Process-wide; set it before the layers run (the solver's precision).
enum class MathMode { kFP32, kTF32, kBF16 };
void set_math_mode(MathMode mode);
MathMode math_mode();
const char* math_mode_name(MathMode mode);
// The cuDNN convolution math type for the current mode.
cudnnMathType_t cudnn_math_type();

// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, row-major, on the
// compute stream, in the current math mode. No-op when M or N is 0; with
// K == 0 it scales C by beta.
void gemm(Transpose ta, Transpose tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          const float* B, float beta, float* C);
// `batch` GEMMs of the same shape, operand i at A + i * stride_a (etc.).
void gemm_strided_batched(Transpose ta, Transpose tb, int64_t M, int64_t N, int64_t K, float alpha,
                          const float* A, int64_t stride_a, const float* B, int64_t stride_b, float beta,
                          float* C, int64_t stride_c, int64_t batch);

void fill(int64_t n, float value, float* x);
// Results read one step later (framework/solver/step_ledger.h): x = weight *
// float(*scale), and *sum += double(weight) * double(*x), all on the device.
void fill_scaled(int64_t n, float weight, const double* scale, float* x);
void add_weighted_loss(double* sum, const float* x, float weight);
// A step's record over data-parallel ranks (device_api.h says what).
void pack_step_results(float* out, const double* loss, float share, float stop);
void unpack_step_results(double* loss, double* stop, const float* in);
void copy(int64_t n, const float* x, float* y);  // y = x (may alias: no-op)
void axpy(int64_t n, float alpha, const float* x, float* y);  // y += alpha * x
void scale(int64_t n, float alpha, float* x);                 // x *= alpha
// An activation a kernel applies to what it writes: a ReLU fused into the
// layer before it (framework/net_fusion.cpp), with the ReLU layer's formula
// (ReLUOp, layers/relu.h: x > 0 ? x : slope * x, so -0 below 0 and NaN kept).
struct Activation {
  bool relu = false;
  float slope = 0.0f;
  __host__ __device__ float operator()(float x) const {
    if (!relu) return x;
    const float neg = slope * x;
    return x > 0.0f ? x : neg;
  }
};
// y[r][c] = act(y[r][c] + b[c]) for row-major y [rows, cols]: a bias added
// to every row (and a fused ReLU), in one pass.
void add_row_bias(int64_t rows, int64_t cols, const float* b, float* y, Activation act = {});
// Sums of [rows, cols] row-major A: y[c] = sum_r A[r][c] + beta * y[c]
// (beta 0 overwrites, 1 accumulates). Deterministic.
void column_sums(int64_t rows, int64_t cols, const float* A, float beta, float* y);
// Per-channel sums of x viewed as [outer, channels, inner]:
// y[c] = sum_{o,i} x[o][c][i] + beta * y[c]; with `w` (non-null, same shape
// as x) the sum is of x * w instead. Deterministic, accumulated in double.
void channel_sums(int64_t outer, int64_t channels, int64_t inner, const float* x, const float* w, float beta,
                  float* y);

// Softmax over the channel axis of x viewed as [outer, channels, inner],
// written to y (may equal x). row_max and row_sum (outer * inner each, may be
// null) receive each position's maximum logit and sum(exp(x - max)), so
// callers can form log-softmax as x - max - log(sum).
void softmax_channels(int64_t outer, int64_t channels, int64_t inner, const float* x, float* y, float* row_max,
                      float* row_sum);
// Its backward from the output y: dx = y * (dy - sum_c(dy * y)); dx may equal dy.
void softmax_channels_backward(int64_t outer, int64_t channels, int64_t inner, const float* y, const float* dy,
                               float* dx);

// The first index a kernel flags as bad (an invalid label, say), reported to
// the host one step later so that no step waits for the GPU: the kernel
// atomicMin()s an index into slot(); record() (after the kernel) starts an
// asynchronous copy to pinned host memory, and previous() waits for the last
// record() and returns what it found, or -1. Use arm() -> kernel -> record()
// once per step, calling previous() first.
// In a step graph: while the step is captured previous() reports nothing and
// record() records a second event of its own as a node of the graph; the
// layer's before_replay() calls before_replay(), which reports the last
// record (eager or replayed) and expects the replay's. A capture that fails
// leaves the eager event as it was, so the eager run after it reads that.
class DeferredIndexCheck {
 public:
  DeferredIndexCheck() = default;
  ~DeferredIndexCheck();
  DeferredIndexCheck(const DeferredIndexCheck&) = delete;
  DeferredIndexCheck& operator=(const DeferredIndexCheck&) = delete;

  int64_t previous();
  int64_t before_replay();
  unsigned long long* arm();  // resets the device slot (on the compute stream)
  void record();

 private:
  unsigned long long* device_ = nullptr;
  unsigned long long* host_ = nullptr;  // pinned
  cudaEvent_t done_ = nullptr;        // recorded by an eager record()
  cudaEvent_t replayed_ = nullptr;    // recorded by a graph's replay
  bool pending_ = false;              // a record() not read yet
  bool last_replayed_ = false;        // which of the two events that record set
  bool graph_records_ = false;        // a captured graph records replayed_
  cudaEvent_t last_event() const { return last_replayed_ ? replayed_ : done_; }
};

// Makes `t` a tensor of `shape` and `dtype` on `device`: resized in place
// when it already lives there (keeps capacity), else replaced. For layer
// scratch members whose constructor or reshape() made them on the host.
void ensure_on_device(Tensor& t, const Shape& shape, DType dtype, Device device);

}  // namespace strata::cuda

#ifdef __CUDACC__
// Grid-stride loop over [0, n) with 64-bit indices.
#define STRATA_CUDA_LOOP(i, n)                                                              \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

namespace strata::cuda {

// Reduction of one value per thread over the block (op: a binary functor,
// `identity` its neutral element); blockDim.x must be a multiple of 32 (at
// most 1024). Every thread of the block must call it, and every thread gets
// the result. Safe to call repeatedly in one kernel.
template <typename T, typename Op>
__device__ inline T block_reduce(T v, Op op, T identity) {
  __shared__ T partial[32];
  __syncthreads();  // a previous call may still be reading `partial`
  for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, off));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  // Every warp reduces the per-warp partials, so every thread ends with the total.
  const int warps = static_cast<int>(blockDim.x >> 5);
  v = lane < warps ? partial[lane] : identity;
  for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, off));
  return __shfl_sync(0xffffffffu, v, 0);
}

struct SumOp {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <typename T>
__device__ inline T block_sum(T v) { return block_reduce(v, SumOp{}, T(0)); }

}  // namespace strata::cuda
#endif

#endif  // STRATA_WITH_CUDA
