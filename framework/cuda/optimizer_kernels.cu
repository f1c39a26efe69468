// Multi-tensor apply: grid = one block per chunk of kChunk elements of any
// tensor in the table; each block finds its tensor by binary search over the
// chunk offsets. Arithmetic uses the _rn intrinsics (no FMA contraction), so
// an update rounds exactly as the CPU loop (compiled without contraction).
#include "framework/cuda/optimizer_kernels.h"

#include <cmath>
#include <memory>
#include <mutex>

#include "framework/cuda/device_api.h"
#include "framework/cuda/runtime.h"

namespace strata::cuda {

namespace {

constexpr int64_t kChunk = int64_t(1) << 16;
constexpr int kThreads = kThreadsPerBlock;

bool same_table(const std::vector<FusedTensor>& a, const std::vector<FusedTensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const FusedTensor &x = a[i], &y = b[i];
    if (x.w != y.w || x.g != y.g || x.s0 != y.s0 || x.s1 != y.s1 || x.n != y.n || x.lr_mult != y.lr_mult ||
        x.decay_mult != y.decay_mult) {
      return false;
    }
  }
  return true;
}

// A table on the device: the tensors, their chunk offsets (count + 1), and
// scratch for the reductions.
struct DeviceTable {
  int device = 0;
  bool kept = false;  // used by a captured step graph: never dropped
  std::vector<FusedTensor> host;
  int count = 0;
  int64_t chunks = 0;
  void* block = nullptr;  // tensors | offsets | partials | result | flag
  FusedTensor* tensors = nullptr;
  int64_t* offsets = nullptr;
  double* partials = nullptr;
  double* result = nullptr;
  int* flag = nullptr;

  ~DeviceTable() { device_free(block, device); }
};

size_t align_up(size_t b) { return (b + 255) / 256 * 256; }

std::mutex g_tables_mu;
std::vector<std::unique_ptr<DeviceTable>> g_tables;  // most recent last; a few kept

// The device copy of `tensors` (without empty ones), uploaded when new.
DeviceTable& table_for(const std::vector<FusedTensor>& all, int index) {
  std::vector<FusedTensor> tensors;
  for (const FusedTensor& t : all) {
    if (t.n > 0) tensors.push_back(t);
  }
  std::lock_guard<std::mutex> lock(g_tables_mu);
  for (size_t i = 0; i < g_tables.size(); ++i) {
    if (g_tables[i]->device == index && same_table(g_tables[i]->host, tensors)) {
      std::unique_ptr<DeviceTable> hit = std::move(g_tables[i]);
      hit->kept = hit->kept || capturing();  // a graph replays with this table's addresses
      g_tables.erase(g_tables.begin() + static_cast<std::ptrdiff_t>(i));
      g_tables.push_back(std::move(hit));
      return *g_tables.back();
    }
  }
  auto t = std::make_unique<DeviceTable>();
  t->device = index;
  t->host = tensors;
  t->count = static_cast<int>(tensors.size());
  std::vector<int64_t> offsets(tensors.size() + 1, 0);
  for (size_t i = 0; i < tensors.size(); ++i) offsets[i + 1] = offsets[i] + (tensors[i].n + kChunk - 1) / kChunk;
  t->chunks = offsets.back();
  const size_t tensors_bytes = align_up(sizeof(FusedTensor) * std::max<size_t>(1, tensors.size()));
  const size_t offsets_bytes = align_up(sizeof(int64_t) * offsets.size());
  const size_t partial_bytes = align_up(sizeof(double) * static_cast<size_t>(std::max<int64_t>(1, t->chunks)));
  const size_t total = tensors_bytes + offsets_bytes + partial_bytes + 2 * 256;
  t->block = device_malloc(total, index);
  char* base = static_cast<char*>(t->block);
  t->tensors = reinterpret_cast<FusedTensor*>(base);
  t->offsets = reinterpret_cast<int64_t*>(base + tensors_bytes);
  t->partials = reinterpret_cast<double*>(base + tensors_bytes + offsets_bytes);
  t->result = reinterpret_cast<double*>(base + tensors_bytes + offsets_bytes + partial_bytes);
  t->flag = reinterpret_cast<int*>(base + tensors_bytes + offsets_bytes + partial_bytes + 256);
  if (!tensors.empty()) {
    STRATA_CUDA_CHECK(cudaMemcpyAsync(t->tensors, tensors.data(), sizeof(FusedTensor) * tensors.size(),
                                      cudaMemcpyHostToDevice, compute_stream()));
  }
  STRATA_CUDA_CHECK(cudaMemcpyAsync(t->offsets, offsets.data(), sizeof(int64_t) * offsets.size(),
                                    cudaMemcpyHostToDevice, compute_stream()));
  // The host vectors die on return: wait for the copies (only when the table changed).
  STRATA_CUDA_CHECK(cudaStreamSynchronize(compute_stream()));
  // Keep a few; the oldest not used by a captured graph goes.
  if (g_tables.size() >= 8) {
    for (auto it = g_tables.begin(); it != g_tables.end(); ++it) {
      if (!(*it)->kept) {
        g_tables.erase(it);
        break;
      }
    }
  }
  g_tables.push_back(std::move(t));
  return *g_tables.back();
}

// The tensor owning chunk `c`: the last t with offsets[t] <= c.
__device__ int find_tensor(const int64_t* offsets, int count, int64_t c) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= c) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

struct ChunkRange {
  FusedTensor t;
  int64_t begin, end;
};

__device__ ChunkRange my_chunk(const FusedTensor* tensors, const int64_t* offsets, int count) {
  __shared__ int owner;
  if (threadIdx.x == 0) owner = find_tensor(offsets, count, blockIdx.x);
  __syncthreads();
  ChunkRange r;
  r.t = tensors[owner];
  r.begin = (static_cast<int64_t>(blockIdx.x) - offsets[owner]) * kChunk;
  r.end = r.begin + kChunk < r.t.n ? r.begin + kChunk : r.t.n;
  return r;
}

__device__ float regularizer(bool l1, float w) { return l1 ? static_cast<float>((w > 0.0f) - (w < 0.0f)) : w; }

__global__ void sgd_kernel(const FusedTensor* tensors, const int64_t* offsets, int count, double lr, float mom,
                           double weight_decay, bool nesterov, bool l1, DeviceGate gate) {
  if (gate.applied && *gate.applied == 0) return;
  if (gate.lr) lr = *gate.lr;
  const ChunkRange r = my_chunk(tensors, offsets, count);
  const float rate = static_cast<float>(lr * static_cast<double>(r.t.lr_mult));
  const float decay = static_cast<float>(weight_decay * static_cast<double>(r.t.decay_mult));
  float* w = r.t.w;
  const float* g = r.t.g;
  float* v = r.t.s0;
  for (int64_t i = r.begin + threadIdx.x; i < r.end; i += blockDim.x) {
    const float wi = w[i];
    const float grad = decay != 0.0f ? __fadd_rn(g[i], __fmul_rn(decay, regularizer(l1, wi))) : g[i];
    const float v_old = v[i];
    const float v_new = __fadd_rn(__fmul_rn(mom, v_old), __fmul_rn(rate, grad));
    const float delta = nesterov ? __fsub_rn(__fmul_rn(1.0f + mom, v_new), __fmul_rn(mom, v_old)) : v_new;
    w[i] = __fsub_rn(wi, delta);
    v[i] = v_new;
  }
}

__global__ void adam_kernel(const FusedTensor* tensors, const int64_t* offsets, int count, double lr,
                            float beta1, float beta2, float one_minus_b1, float one_minus_b2, double bias_c1,
                            float bc2_sqrt, float eps, double weight_decay, bool decoupled, bool l1,
                            double beta1_d, double beta2_d, DeviceGate gate) {
  if (gate.applied && *gate.applied == 0) return;
  if (gate.lr) lr = *gate.lr;
  if (gate.step) {
    // t is the device's count of applied updates: the bias corrections as fused_adam computes them.
    const double tt = static_cast<double>(*gate.step);
    bias_c1 = 1.0 - pow(beta1_d, tt);
    bc2_sqrt = static_cast<float>(sqrt(1.0 - pow(beta2_d, tt)));
  }
  const ChunkRange r = my_chunk(tensors, offsets, count);
  const double local_lr = lr * static_cast<double>(r.t.lr_mult);
  const double wd = weight_decay * static_cast<double>(r.t.decay_mult);
  const float l2 = decoupled ? 0.0f : static_cast<float>(wd);
  const float shrink = decoupled ? static_cast<float>(1.0 - local_lr * wd) : 1.0f;
  const float step_size = static_cast<float>(local_lr / bias_c1);
  float* w = r.t.w;
  const float* g = r.t.g;
  float* m = r.t.s0;
  float* s = r.t.s1;
  for (int64_t i = r.begin + threadIdx.x; i < r.end; i += blockDim.x) {
    const float wi = w[i];
    const float grad = l2 != 0.0f ? __fadd_rn(g[i], __fmul_rn(l2, regularizer(l1, wi))) : g[i];
    const float mi = __fadd_rn(__fmul_rn(m[i], beta1), __fmul_rn(one_minus_b1, grad));
    const float si = __fadd_rn(__fmul_rn(s[i], beta2), __fmul_rn(__fmul_rn(one_minus_b2, grad), grad));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(si), bc2_sqrt), eps);
    m[i] = mi;
    s[i] = si;
    w[i] = __fsub_rn(__fmul_rn(wi, shrink), __fmul_rn(step_size, __fdiv_rn(mi, denom)));
  }
}

// The same arithmetic, in the same order, as AdaptiveOptimizer and
// AdaDeltaOptimizer in framework/solver/optimizer.cpp.
__global__ void adaptive_kernel(const FusedTensor* tensors, const int64_t* offsets, int count, double lr,
                                AdaptiveRule rule, float keep, float add, float delta, double weight_decay,
                                bool l1, DeviceGate gate) {
  if (gate.applied && *gate.applied == 0) return;
  if (gate.lr) lr = *gate.lr;
  const ChunkRange r = my_chunk(tensors, offsets, count);
  const float rate = static_cast<float>(lr * static_cast<double>(r.t.lr_mult));
  const float decay = static_cast<float>(weight_decay * static_cast<double>(r.t.decay_mult));
  float* w = r.t.w;
  const float* g = r.t.g;
  float* h = r.t.s0;
  float* hu = r.t.s1;
  for (int64_t i = r.begin + threadIdx.x; i < r.end; i += blockDim.x) {
    const float wi = w[i];
    const float grad = decay != 0.0f ? __fadd_rn(g[i], __fmul_rn(decay, regularizer(l1, wi))) : g[i];
    const float g2 = __fmul_rn(grad, grad);
    if (rule == AdaptiveRule::kAdaDelta) {
      const float hi = __fadd_rn(__fmul_rn(keep, h[i]), __fmul_rn(add, g2));
      h[i] = hi;
      const float u = __fmul_rn(grad, __fsqrt_rn(__fdiv_rn(__fadd_rn(hu[i], delta), __fadd_rn(hi, delta))));
      hu[i] = __fadd_rn(__fmul_rn(keep, hu[i]), __fmul_rn(add, __fmul_rn(u, u)));
      w[i] = __fsub_rn(wi, __fmul_rn(rate, u));
    } else {
      const float hi = rule == AdaptiveRule::kRMSProp ? __fadd_rn(__fmul_rn(keep, h[i]), __fmul_rn(add, g2))
                                                      : __fadd_rn(h[i], g2);
      h[i] = hi;
      w[i] = __fsub_rn(wi, __fdiv_rn(__fmul_rn(rate, grad), __fadd_rn(__fsqrt_rn(hi), delta)));
    }
  }
}

__global__ void scale_stats_kernel(const FusedTensor* tensors, const int64_t* offsets, int count, float factor,
                                   bool stats, double* partials, int* nonfinite, const double* loss_scale,
                                   double divisor) {
  if (loss_scale) factor = static_cast<float>(1.0 / (*loss_scale * divisor));
  const ChunkRange r = my_chunk(tensors, offsets, count);
  float* g = r.t.g;
  double acc = 0.0;
  bool bad = false;
  for (int64_t i = r.begin + threadIdx.x; i < r.end; i += blockDim.x) {
    float v = g[i];
    if (factor != 1.0f) {
      v = __fmul_rn(v, factor);
      g[i] = v;
    }
    if (stats) {
      bad = bad || !isfinite(v);
      acc += static_cast<double>(v) * static_cast<double>(v);
    }
  }
  if (!stats) return;
  if (bad) atomicOr(nonfinite, 1);
  __shared__ double sh[kThreads];
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = sh[0];
}

__global__ void clip_kernel(const FusedTensor* tensors, const int64_t* offsets, int count, const double* sum_squares,
                            double max_norm) {
  const double norm = sqrt(*sum_squares);
  if (!(norm > max_norm)) return;
  const float factor = static_cast<float>(max_norm / (norm + 1e-6));
  const ChunkRange r = my_chunk(tensors, offsets, count);
  float* g = r.t.g;
  for (int64_t i = r.begin + threadIdx.x; i < r.end; i += blockDim.x) g[i] = __fmul_rn(g[i], factor);
}

// One block sums the per-chunk partials in a fixed order.
__global__ void sum_partials_kernel(const double* partials, int64_t n, double* out) {
  __shared__ double sh[kThreads];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += partials[i];
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = sh[0];
}

}  // namespace

void fused_sgd(const std::vector<FusedTensor>& tensors, const FusedSgdArgs& a, int index) {
  DeviceGuard device(index);
  DeviceTable& t = table_for(tensors, index);
  if (t.chunks == 0) return;
  sgd_kernel<<<static_cast<unsigned>(t.chunks), kThreads, 0, compute_stream()>>>(
      t.tensors, t.offsets, t.count, a.lr, static_cast<float>(a.momentum), a.weight_decay, a.nesterov, a.l1,
      a.gate);
  STRATA_KERNEL_CHECK();
}

void fused_adam(const std::vector<FusedTensor>& tensors, const FusedAdamArgs& a, int index) {
  DeviceGuard device(index);
  DeviceTable& t = table_for(tensors, index);
  if (t.chunks == 0) return;
  const double tt = static_cast<double>(a.step);
  const double bias_c1 = 1.0 - std::pow(a.beta1, tt);
  const float bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(a.beta2, tt)));
  adam_kernel<<<static_cast<unsigned>(t.chunks), kThreads, 0, compute_stream()>>>(
      t.tensors, t.offsets, t.count, a.lr, static_cast<float>(a.beta1), static_cast<float>(a.beta2),
      static_cast<float>(1.0 - a.beta1), static_cast<float>(1.0 - a.beta2), bias_c1, bc2_sqrt,
      static_cast<float>(a.eps), a.weight_decay, a.decoupled, a.l1, a.beta1, a.beta2, a.gate);
  STRATA_KERNEL_CHECK();
}

void fused_adaptive(const std::vector<FusedTensor>& tensors, const FusedAdaptiveArgs& a, int index) {
  DeviceGuard device(index);
  DeviceTable& t = table_for(tensors, index);
  if (t.chunks == 0) return;
  const bool averaged = a.rule != AdaptiveRule::kAdaGrad;
  const float keep = averaged ? static_cast<float>(a.decay) : 1.0f;
  const float add = averaged ? static_cast<float>(1.0 - a.decay) : 1.0f;
  adaptive_kernel<<<static_cast<unsigned>(t.chunks), kThreads, 0, compute_stream()>>>(
      t.tensors, t.offsets, t.count, a.lr, a.rule, keep, add, static_cast<float>(a.delta), a.weight_decay, a.l1,
      a.gate);
  STRATA_KERNEL_CHECK();
}

GradStats fused_scale_gradients(const std::vector<FusedTensor>& tensors, float factor, ReadBack read_back,
                                int index) {
  GradStats out;
  const bool stats = read_back == ReadBack::kYes;
  if (factor == 1.0f && !stats) return out;
  DeviceGuard device(index);
  DeviceTable& t = table_for(tensors, index);
  if (t.chunks == 0) return out;
  cudaStream_t stream = compute_stream();
  if (stats) STRATA_CUDA_CHECK(cudaMemsetAsync(t.flag, 0, sizeof(int), stream));
  scale_stats_kernel<<<static_cast<unsigned>(t.chunks), kThreads, 0, stream>>>(t.tensors, t.offsets, t.count,
                                                                               factor, stats, t.partials, t.flag,
                                                                               nullptr, 1.0);
  STRATA_KERNEL_CHECK();
  if (!stats) return out;
  sum_partials_kernel<<<1, kThreads, 0, stream>>>(t.partials, t.chunks, t.result);
  STRATA_KERNEL_CHECK();
  int flag = 0;
  STRATA_CUDA_CHECK(cudaMemcpyAsync(&out.sum_squares, t.result, sizeof(double), cudaMemcpyDeviceToHost, stream));
  STRATA_CUDA_CHECK(cudaMemcpyAsync(&flag, t.flag, sizeof(int), cudaMemcpyDeviceToHost, stream));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
  out.finite = flag == 0;
  return out;
}

void fused_scale_check_on_device(const std::vector<FusedTensor>& tensors, float factor, const double* loss_scale,
                                 double divisor, int32_t* nonfinite, double* sum_squares, int index) {
  DeviceGuard device(index);
  DeviceTable& t = table_for(tensors, index);
  cudaStream_t stream = compute_stream();
  if (t.chunks == 0) {
    STRATA_CUDA_CHECK(cudaMemsetAsync(sum_squares, 0, sizeof(double), stream));
    return;
  }
  // The record's flag was zeroed when its step began.
  scale_stats_kernel<<<static_cast<unsigned>(t.chunks), kThreads, 0, stream>>>(
      t.tensors, t.offsets, t.count, factor, true, t.partials, nonfinite, loss_scale, divisor);
  STRATA_KERNEL_CHECK();
  sum_partials_kernel<<<1, kThreads, 0, stream>>>(t.partials, t.chunks, sum_squares);
  STRATA_KERNEL_CHECK();
}

void fused_clip_on_device(const std::vector<FusedTensor>& tensors, const double* sum_squares, double max_norm,
                          int index) {
  DeviceGuard device(index);
  DeviceTable& t = table_for(tensors, index);
  if (t.chunks == 0) return;
  clip_kernel<<<static_cast<unsigned>(t.chunks), kThreads, 0, compute_stream()>>>(t.tensors, t.offsets, t.count,
                                                                                sum_squares, max_norm);
  STRATA_KERNEL_CHECK();
}

}  // namespace strata::cuda
