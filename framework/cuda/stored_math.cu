#include "framework/cuda/stored_math.h"

#include <limits>

#include "framework/cuda/device_api.h"
#include "framework/cuda/elements.cuh"
#include "framework/cuda/runtime.h"
#include "framework/error.h"

namespace strata::cuda {

namespace {

cudaDataType_t cuda_type(DType dtype, const char* what) {
  switch (dtype) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    default: break;
  }
  fail<Error>(what, ": operands stored in ", dtype_name(dtype), " (f32, bf16 and f16 only)");
}

int checked_int(int64_t v, const char* what) {
  STRATA_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(), "cuBLAS ", what, " ", v,
               " does not fit in an int; split the operation");
  return static_cast<int>(v);
}

cublasOperation_t op(Transpose t) { return t == Transpose::kYes ? CUBLAS_OP_T : CUBLAS_OP_N; }

template <class T>
__global__ void fill_rows_kernel(int64_t rows, int64_t cols, const float* b, T* y) {
  STRATA_CUDA_LOOP(k, rows * cols) y[k] = store_element<T>(b[k % cols]);
}

// One cuBLASLt matmul with its descriptors, made and destroyed together.
struct LtMatmul {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtMatmul() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// cuBLASLt's workspace: what its guide suggests for Hopper's best kernels.
constexpr size_t kLtWorkspace = size_t(32) << 20;

// The largest power of two (up to 256) that divides the address: cuBLASLt's
// heuristic assumes 256-byte aligned operands unless told, and a kernel
// chosen for that faults on a view that starts elsewhere in the arena.
uint32_t alignment_of(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

// The operation: f32 sums, the operands' ops, and an epilogue with its f32
// bias (or bias gradient) vector.
void describe(LtMatmul& mm, cublasOperation_t op_a, cublasOperation_t op_b, cublasLtEpilogue_t epilogue,
              const void* bias) {
  STRATA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&mm.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  STRATA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(mm.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
  STRATA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(mm.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
  STRATA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(mm.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
  STRATA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(mm.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  const cudaDataType_t bias_type = CUDA_R_32F;  // f32 as the parameters are, not rounded
  STRATA_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(mm.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type));
}

// The preference: the workspace cap and each operand's real alignment.
void prefer(LtMatmul& mm, const void* a, const void* b, const void* d) {
  STRATA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&mm.pref));
  const size_t ws_bytes = kLtWorkspace;
  STRATA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(mm.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                           &ws_bytes, sizeof ws_bytes));
  const uint32_t align_a = alignment_of(a), align_b = alignment_of(b), align_d = alignment_of(d);
  STRATA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(mm.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                           &align_a, sizeof align_a));
  STRATA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(mm.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                           &align_b, sizeof align_b));
  STRATA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(mm.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                           &align_d, sizeof align_d));
  STRATA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(mm.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                           &align_d, sizeof align_d));
}

// Runs the matmul the heuristic chose; false (nothing written) when there is
// none for this problem or cuBLASLt refuses it at launch.
bool run_lt(LtMatmul& mm, const void* a, const void* b, float beta, void* d) {
  cublasLtMatmulHeuristicResult_t best{};
  int found = 0;
  const cublasStatus_t h = cublasLtMatmulAlgoGetHeuristic(cublaslt_handle(), mm.op, mm.a, mm.b, mm.d, mm.d, mm.pref,
                                                          1, &best, &found);
  if (h == CUBLAS_STATUS_NOT_SUPPORTED || (h == CUBLAS_STATUS_SUCCESS && found == 0)) return false;
  STRATA_CUBLAS_CHECK(h);
  const float alpha = 1.0f;
  void* ws = best.workspaceSize > 0 ? workspace(best.workspaceSize) : nullptr;
  const cublasStatus_t r = cublasLtMatmul(cublaslt_handle(), mm.op, &alpha, a, mm.a, b, mm.b, &beta, d, mm.d, d,
                                          mm.d, &best.algo, ws, best.workspaceSize, compute_stream());
  if (r == CUBLAS_STATUS_NOT_SUPPORTED) return false;
  STRATA_CUBLAS_CHECK(r);
  return true;
}

// One thread per column, rows summed in order: coalesced across threads.
template <class T>
__global__ void column_sums_stored_kernel(int64_t rows, int64_t cols, const T* a, float beta, float* y) {
  STRATA_CUDA_LOOP(c, cols) {
    double s = 0.0;
    for (int64_t r = 0; r < rows; ++r) s += load_element(a[r * cols + c]);
    y[c] = static_cast<float>(s) + (beta == 0.0f ? 0.0f : beta * y[c]);
  }
}

// One block per channel; threads stride over (outer, inner), then a shared-memory tree.
template <class T>
__global__ void channel_sums_stored_kernel(int64_t outer, int64_t channels, int64_t inner, const T* x, const T* w,
                                           float beta, float* y) {
  __shared__ double partial[kThreadsPerBlock];
  const int64_t c = blockIdx.x;
  const int64_t m = outer * inner;
  double s = 0.0;
  for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
    const int64_t o = k / inner, i = k - o * inner;
    const int64_t at = (o * channels + c) * inner + i;
    s += w ? static_cast<double>(load_element(x[at])) * load_element(w[at]) : static_cast<double>(load_element(x[at]));
  }
  partial[threadIdx.x] = s;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) y[c] = static_cast<float>(partial[0]) + (beta == 0.0f ? 0.0f : beta * y[c]);
}

template <class T>
__global__ void add_channel_bias_kernel(int64_t outer, int64_t channels, int64_t inner, const float* b,
                                        Activation act, T* y) {
  STRATA_CUDA_LOOP(k, outer * channels * inner) {
    const int64_t c = (k / inner) % channels;
    y[k] = store_element<T>(act(load_element(y[k]) + b[c]));
  }
}

template <class T>
__global__ void accumulate_widened_kernel(int64_t n, const T* src, float* dst) {
  STRATA_CUDA_LOOP(i, n) dst[i] += load_element(src[i]);
}

}  // namespace

void gemm_stored(Transpose ta, Transpose tb, int64_t M, int64_t N, int64_t K, float alpha, const void* A,
                 const void* B, DType ab, float beta, void* C, DType c) {
  gemm_stored_strided_batched(ta, tb, M, N, K, alpha, A, 0, B, 0, ab, beta, C, 0, c, 1);
}

void gemm_stored_strided_batched(Transpose ta, Transpose tb, int64_t M, int64_t N, int64_t K, float alpha,
                                 const void* A, int64_t stride_a, const void* B, int64_t stride_b, DType ab,
                                 float beta, void* C, int64_t stride_c, DType c, int64_t batch) {
  if (ab == DType::kF32 && c == DType::kF32) {
    cuda::gemm_strided_batched(ta, tb, M, N, K, alpha, static_cast<const float*>(A), stride_a,
                               static_cast<const float*>(B), stride_b, beta, static_cast<float*>(C), stride_c, batch);
    return;
  }
  STRATA_CHECK(c == ab || c == DType::kF32, "gemm_stored: operands in ", dtype_name(ab), " and a result in ",
               dtype_name(c), " (the operands' dtype or f32)");
  const cudaDataType_t ab_type = cuda_type(ab, "gemm_stored");
  const cudaDataType_t c_type = cuda_type(c, "gemm_stored");
  if (M == 0 || N == 0 || batch == 0) return;
  if (K == 0) {  // op(A) op(B) is empty: C = beta * C
    STRATA_CHECK(c == DType::kF32 || beta == 0.0f || beta == 1.0f, "gemm_stored: K == 0 with beta ", beta,
                 " on a ", dtype_name(c), " result (0 or 1 only)");
    for (int64_t i = 0; i < batch; ++i) {
      if (c == DType::kF32) {
        float* ci = static_cast<float*>(C) + i * stride_c;
        if (beta == 0.0f) cuda::fill(M * N, 0.0f, ci);
        if (beta != 0.0f && beta != 1.0f) cuda::scale(M * N, beta, ci);
      } else if (beta == 0.0f) {
        char* ci = static_cast<char*>(C) + i * stride_c * static_cast<int64_t>(dtype_size(c));
        STRATA_CUDA_CHECK(cudaMemsetAsync(ci, 0, static_cast<size_t>(M * N) * dtype_size(c), compute_stream()));
      }
    }
    return;
  }
  const int m = checked_int(M, "M"), n = checked_int(N, "N"), k = checked_int(K, "K");
  const int b = checked_int(batch, "batch");
  const int lda = ta == Transpose::kNo ? k : m;
  const int ldb = tb == Transpose::kNo ? n : k;
  // Row-major C = A B is column-major C^T = B^T A^T: B first.
  if (b == 1) {
    STRATA_CUBLAS_CHECK(cublasGemmEx(cublas_handle(), op(tb), op(ta), n, m, k, &alpha, B, ab_type, ldb, A, ab_type,
                                     lda, &beta, C, c_type, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    STRATA_CUBLAS_CHECK(cublasGemmStridedBatchedEx(cublas_handle(), op(tb), op(ta), n, m, k, &alpha, B, ab_type, ldb,
                                                   stride_b, A, ab_type, lda, stride_a, &beta, C, c_type, n, stride_c,
                                                   b, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

bool gemm_stored_bias(Transpose tw, int64_t M, int64_t N, int64_t K, const void* X, const void* W, DType st,
                      const float* bias, void* Y) {
  const cudaDataType_t type = cuda_type(st, "gemm_stored_bias");
  STRATA_CHECK(st != DType::kF32, "gemm_stored_bias takes bf16 or f16 operands, not f32");
  if (M == 0 || N == 0 || K == 0) return false;  // the plain path handles the edges
  const int m = checked_int(M, "M"), n = checked_int(N, "N"), k = checked_int(K, "K");
  // Row-major Y = X op(W) is column-major Y^T[N, M] = op(W)^T X^T: W is Lt's
  // A (as gemm_stored passes B first), X its B, and the bias runs along Y^T's
  // N rows, one value per output column of Y.
  LtMatmul mm;
  describe(mm, tw == Transpose::kNo ? CUBLAS_OP_N : CUBLAS_OP_T, CUBLAS_OP_N, CUBLASLT_EPILOGUE_BIAS, bias);
  // Column-major layouts as stored (before the op): W is [N, K] with ld N when
  // not transposed, else [K, N] with ld K; X is [K, M], ld K; Y^T is [N, M], ld N.
  STRATA_CUBLAS_CHECK(tw == Transpose::kNo ? cublasLtMatrixLayoutCreate(&mm.a, type, n, k, n)
                                           : cublasLtMatrixLayoutCreate(&mm.a, type, k, n, k));
  STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&mm.b, type, k, m, k));
  STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&mm.d, type, n, m, n));
  prefer(mm, W, X, Y);
  return run_lt(mm, W, X, 0.0f, Y);
}

void linear_stored(Transpose tw, int64_t M, int64_t N, int64_t K, const void* X, const void* W, DType st,
                   const float* bias, void* Y) {
  if (bias && gemm_stored_bias(tw, M, N, K, X, W, st, bias, Y)) return;
  if (bias) fill_rows(M, N, bias, Y, st);
  gemm_stored(Transpose::kNo, tw, M, N, K, 1.0f, X, W, st, bias ? 1.0f : 0.0f, Y, st);
}

namespace {

// dW (+)= the product with the bias gradient from the epilogue, into `db_out`
// (written, not accumulated). False when cuBLASLt has no algorithm for it.
bool weight_grad_with_bias_grad(bool output_major, int m_rows, int n, int k, const void* dY, const void* X,
                                cudaDataType_t type, float* dW, float* db_out) {
  // Column-major, as gemm_stored maps row-major products (its B first):
  //   output-major dW[N, K] = dY^T X: Lt's A = X ([K, M], ld K, op N), B = dY
  //   ([N, M], ld N, op T), D = dW^T ([K, N], ld K); the bias gradient is D's
  //   N columns reduced over k = M from B: BGRADB.
  //   input-major dW[K, N] = X^T dY: A = dY ([N, M], ld N, op N), B = X
  //   ([K, M], ld K, op T), D ([N, K], ld N); D's N rows from A: BGRADA.
  const void* a = output_major ? X : dY;
  const void* b = output_major ? dY : X;
  const int a_rows = output_major ? k : n, b_rows = output_major ? n : k;
  LtMatmul mm;
  describe(mm, CUBLAS_OP_N, CUBLAS_OP_T, output_major ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_BGRADA, db_out);
  STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&mm.a, type, a_rows, m_rows, a_rows));
  STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&mm.b, type, b_rows, m_rows, b_rows));
  STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&mm.d, CUDA_R_32F, a_rows, b_rows, a_rows));
  prefer(mm, a, b, dW);
  return run_lt(mm, a, b, 1.0f, dW);  // beta 1: the weight gradient accumulates
}

}  // namespace

bool linear_grads_stored(bool output_major, int64_t M, int64_t N, int64_t K, const void* dY, const void* X,
                         DType st, float* dW, float* db) {
  const cudaDataType_t type = cuda_type(st, "linear_grads_stored");
  STRATA_CHECK(st != DType::kF32, "linear_grads_stored takes bf16 or f16 blobs, not f32");
  if (db && M > 0 && N > 0 && K > 0) {
    const int m = checked_int(M, "M"), n = checked_int(N, "N"), k = checked_int(K, "K");
    // The epilogue writes the column sums (into a block of the caching
    // allocator, used and given back in this stream's order); the
    // parameter's gradient accumulates them after.
    const int device = current_device();
    float* sums = static_cast<float*>(device_malloc(static_cast<size_t>(n) * sizeof(float), device));
    const bool fused = weight_grad_with_bias_grad(output_major, m, n, k, dY, X, type, dW, sums);
    if (fused) axpy(N, 1.0f, sums, db);
    device_free(sums, device);
    if (fused) return true;
  }
  if (output_major) {
    gemm_stored(Transpose::kYes, Transpose::kNo, N, K, M, 1.0f, dY, X, st, 1.0f, dW, DType::kF32);
  } else {
    gemm_stored(Transpose::kYes, Transpose::kNo, K, N, M, 1.0f, X, dY, st, 1.0f, dW, DType::kF32);
  }
  if (db) column_sums_stored(M, N, dY, st, 1.0f, db);
  return false;
}

void fill_rows(int64_t rows, int64_t cols, const float* b, void* y, DType dtype) {
  if (rows <= 0 || cols <= 0) return;
  with_device_element(dtype, "fill_rows", [&](auto e) {
    using T = decltype(e);
    fill_rows_kernel<T><<<blocks_for(rows * cols), kThreadsPerBlock, 0, compute_stream()>>>(rows, cols, b,
                                                                                            static_cast<T*>(y));
    STRATA_KERNEL_CHECK();
  });
}

void column_sums_stored(int64_t rows, int64_t cols, const void* A, DType dtype, float beta, float* y) {
  if (cols <= 0) return;
  with_device_element(dtype, "column_sums_stored", [&](auto e) {
    using T = decltype(e);
    column_sums_stored_kernel<T><<<blocks_for(cols), kThreadsPerBlock, 0, compute_stream()>>>(
        rows, cols, static_cast<const T*>(A), beta, y);
    STRATA_KERNEL_CHECK();
  });
}

void channel_sums_stored(int64_t outer, int64_t channels, int64_t inner, const void* x, const void* w, DType dtype,
                         float beta, float* y) {
  if (channels <= 0) return;
  STRATA_CHECK(channels <= std::numeric_limits<int>::max(), "channel_sums_stored: too many channels (", channels,
               ")");
  with_device_element(dtype, "channel_sums_stored", [&](auto e) {
    using T = decltype(e);
    channel_sums_stored_kernel<T><<<static_cast<unsigned>(channels), kThreadsPerBlock, 0, compute_stream()>>>(
        outer, channels, inner, static_cast<const T*>(x), static_cast<const T*>(w), beta, y);
    STRATA_KERNEL_CHECK();
  });
}

void add_channel_bias_stored(int64_t outer, int64_t channels, int64_t inner, const float* b, void* y, DType dtype,
                             Activation act) {
  const int64_t n = outer * channels * inner;
  if (n <= 0) return;
  with_device_element(dtype, "add_channel_bias_stored", [&](auto e) {
    using T = decltype(e);
    add_channel_bias_kernel<T><<<blocks_for(n), kThreadsPerBlock, 0, compute_stream()>>>(outer, channels, inner, b,
                                                                                          act, static_cast<T*>(y));
    STRATA_KERNEL_CHECK();
  });
}

void accumulate_widened(int64_t n, const void* src, DType dtype, float* dst) {
  if (n <= 0) return;
  with_device_element(dtype, "accumulate_widened", [&](auto e) {
    using T = decltype(e);
    accumulate_widened_kernel<T><<<blocks_for(n), kThreadsPerBlock, 0, compute_stream()>>>(
        n, static_cast<const T*>(src), dst);
    STRATA_KERNEL_CHECK();
  });
}

}  // namespace strata::cuda
