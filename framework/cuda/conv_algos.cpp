// cuDNN's side of choosing convolution algorithms (see conv_algos.h): the
// timing with cudnnFind*AlgorithmEx, the heuristic, the workspace budget,
// and the check that a remembered choice still fits this shape and budget.
#ifdef STRATA_WITH_CUDA

#include "framework/cuda/conv_algos.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>

#include "framework/byte_size.h"
#include "framework/cuda/device_api.h"
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "framework/error.h"

namespace strata::cuda {

// The name tables of conv_algo_cache.cpp are indexed by these values.
static_assert(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM == 1 && CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING == 5 &&
                  CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED == 7 && CUDNN_CONVOLUTION_FWD_ALGO_COUNT == 8,
              "cuDNN's forward algorithm enumerators changed: update kFwdNames in conv_algo_cache.cpp");
static_assert(CUDNN_CONVOLUTION_BWD_DATA_ALGO_1 == 1 && CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING == 3 &&
                  CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED == 5 && CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT == 6,
              "cuDNN's backward-data algorithm enumerators changed: update kBwdDataNames in conv_algo_cache.cpp");
static_assert(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3 == 3 && CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED == 5 &&
                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING == 6 && CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT == 7,
              "cuDNN's backward-filter algorithm enumerators changed: update kBwdFilterNames in conv_algo_cache.cpp");
static_assert(CUDNN_DEFAULT_MATH == 0 && CUDNN_TENSOR_OP_MATH == 1 && CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION == 2 &&
                  CUDNN_FMA_MATH == 3,
              "cuDNN's math types changed: update kMathNames in conv_algo_cache.cpp");

namespace {

constexpr int kMaxAlgos = 16;  // more than any direction has
constexpr size_t kMinFindWorkspace = size_t{1} << 20;

constexpr ConvDirection kFwd = ConvDirection::kForward;
constexpr ConvDirection kBwdData = ConvDirection::kBackwardData;
constexpr ConvDirection kBwdFilter = ConvDirection::kBackwardFilter;
constexpr ConvDirection kDirections[kConvDirections] = {kFwd, kBwdData, kBwdFilter};

int idx(ConvDirection d) { return static_cast<int>(d); }

// Whether the problem being chosen for has 16-bit data (bf16, f16): set by
// choose_conv_algos for the length of its call, on its thread. Such data
// runs on tensor cores in every math mode: FP32 mode's rule below keeps f32
// data from being rounded, and 16-bit data has nothing left to round.
thread_local bool t_reduced_data = false;

// FP32 mode's rules apply: f32 data in FP32 math mode.
bool fp32_rules() { return math_mode() == MathMode::kFP32 && !t_reduced_data; }

// What the descriptor is set to when `math` was measured or chosen. FP32
// mode always runs FMA math: a candidate reported in DEFAULT math would
// otherwise be free to use TF32 tensor cores.
cudnnMathType_t run_math(int math) {
  return fp32_rules() ? CUDNN_FMA_MATH : static_cast<cudnnMathType_t>(math);
}

// Tensor-op variants round fp32 inputs (to TF32, or with conversion to
// fp16/bf16): never in FP32 mode, and conversion never (convolutions run in
// TF32 at most; see docs/config.md, Precision).
bool math_allowed(int math) {
  if (math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return false;
  return !fp32_rules() || math != CUDNN_TENSOR_OP_MATH;
}

// Marks the data of the problem chosen for on this thread as 16-bit (or not) for the scope's length.
class ReducedDataScope {
 public:
  explicit ReducedDataScope(bool reduced) { t_reduced_data = reduced; }
  ~ReducedDataScope() { t_reduced_data = false; }
  ReducedDataScope(const ReducedDataScope&) = delete;
  ReducedDataScope& operator=(const ReducedDataScope&) = delete;
};

template <typename Perf>
bool usable(const Perf& p, size_t budget, Determinism det) {
  if (p.status != CUDNN_STATUS_SUCCESS || p.memory > budget) return false;
  if (det == Determinism::kRequired && p.determinism != CUDNN_DETERMINISTIC) return false;
  return math_allowed(static_cast<int>(p.mathType));
}

enum class Timed { kNo, kYes };

template <typename Perf>
void take(const Perf& p, Timed timed, ConvAlgoPick* out) {
  out->algo = static_cast<int>(p.algo);
  out->math = static_cast<int>(p.mathType);
  out->workspace_bytes = p.memory;
  out->ms = timed == Timed::kYes ? static_cast<double>(p.time) : -1.0;
}

// The heuristic's candidates come best first: the first usable one.
template <typename Perf>
bool first_usable(const Perf* perf, int n, size_t budget, Determinism det, ConvAlgoPick* out, Timed timed) {
  for (int i = 0; i < n; ++i) {
    if (!usable(perf[i], budget, det)) continue;
    take(perf[i], timed, out);
    return true;
  }
  return false;
}

// Of the timed candidates at most `slack_percent` slower than the fastest
// usable one, the one with the least workspace: a few per cent of one
// convolution's time for what can be gigabytes (VGG-16's conv1_2 at batch
// 64 on an H100: the fastest, WINOGRAD_NONFUSED, wanted 3.45 GiB).
template <typename Perf>
bool leanest_near_fastest(const Perf* perf, int n, size_t budget, Determinism det, int slack_percent,
                          ConvAlgoPick* out) {
  float fastest = -1.0f;
  for (int i = 0; i < n; ++i) {
    if (usable(perf[i], budget, det) && (fastest < 0.0f || perf[i].time < fastest)) fastest = perf[i].time;
  }
  if (fastest < 0.0f) return false;
  int pick = -1;
  for (int i = 0; i < n; ++i) {
    if (!usable(perf[i], budget, det) || perf[i].time > fastest * (1.0f + 0.01f * static_cast<float>(slack_percent))) continue;
    if (pick < 0 || perf[i].memory < perf[pick].memory ||
        (perf[i].memory == perf[pick].memory && perf[i].time < perf[pick].time)) {
      pick = i;
    }
  }
  take(perf[pick], Timed::kYes, out);
  return true;
}

// Workspace of `algo` for direction `dir` with the descriptor as it is; the
// status is returned, not thrown (an algorithm may not support the shape).
cudnnStatus_t workspace_size(ConvDirection dir, int algo, const ConvDescriptors& d, size_t* bytes) {
  cudnnHandle_t h = cudnn_handle();
  *bytes = 0;
  switch (dir) {
    case kFwd:
      return cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv[idx(kFwd)], d.y,
                                                     static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes);
    case kBwdData:
      return cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w, d.y, d.conv[idx(kBwdData)], d.x,
                                                          static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
    case kBwdFilter:
      return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x, d.y, d.conv[idx(kBwdFilter)], d.w,
                                                            static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo),
                                                            bytes);
  }
  return CUDNN_STATUS_BAD_PARAM;
}

void set_math(const ConvDescriptors& d, ConvDirection dir, cudnnMathType_t math) {
  STRATA_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv[idx(dir)], math));
}

// Per algorithm: the smaller of the configured limit and half of what the
// device could still hand the caching allocator.
size_t workspace_budget(size_t limit) {
  size_t free_b = 0, total_b = 0;
  STRATA_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const AllocatorStats s = memory_stats(current_device());
  const size_t cached = s.reserved_bytes > s.allocated_bytes ? s.reserved_bytes - s.allocated_bytes : 0;
  return std::min(limit, (free_b + cached) / 2);
}

// Device memory from the caching allocator for the length of a measurement.
class Scratch {
 public:
  Scratch(size_t bytes, int device)
      : device_(device), bytes_(bytes), ptr_(bytes ? device_malloc(bytes, device) : nullptr) {}
  // The largest block up to `bytes` the device can give, halving on failure
  // (down to none): a smaller workspace only leaves some candidates out.
  static Scratch at_most(size_t bytes, int device) {
    size_t want = bytes;
    while (want > 0) {
      try {
        return Scratch(want, device);
      } catch (const Error&) {
        // out of memory: try half
      }
      want = want > kMinFindWorkspace ? want / 2 : 0;
    }
    return Scratch(0, device);
  }
  Scratch(Scratch&& o) noexcept : device_(o.device_), bytes_(o.bytes_), ptr_(o.ptr_) { o.ptr_ = nullptr; }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  Scratch& operator=(Scratch&&) = delete;
  ~Scratch() { device_free(ptr_, device_); }
  void* get() const { return ptr_; }
  size_t bytes() const { return ptr_ ? bytes_ : 0; }

 private:
  int device_;
  size_t bytes_;
  void* ptr_;
};

// cuDNN's first heuristic candidate for one direction that is usable.
bool heuristic_pick(ConvDirection dir, const ConvDescriptors& d, size_t budget, Determinism det, ConvAlgoPick* out) {
  cudnnHandle_t h = cudnn_handle();
  int n = 0;
  switch (dir) {
    case kFwd: {
      cudnnConvolutionFwdAlgoPerf_t perf[kMaxAlgos];
      STRATA_CUDNN_CHECK(
          cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv[idx(dir)], d.y, kMaxAlgos, &n, perf));
      return first_usable(perf, n, budget, det, out, Timed::kNo);
    }
    case kBwdData: {
      cudnnConvolutionBwdDataAlgoPerf_t perf[kMaxAlgos];
      STRATA_CUDNN_CHECK(
          cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv[idx(dir)], d.x, kMaxAlgos, &n, perf));
      return first_usable(perf, n, budget, det, out, Timed::kNo);
    }
    case kBwdFilter: {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[kMaxAlgos];
      STRATA_CUDNN_CHECK(
          cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv[idx(dir)], d.w, kMaxAlgos, &n, perf));
      return first_usable(perf, n, budget, det, out, Timed::kNo);
    }
  }
  return false;
}

[[noreturn]] void no_algorithm(ConvDirection dir, const ConvProblem& p, size_t budget, const std::string& where) {
  fail<Error>(where, ": cuDNN offers no usable ", conv_direction_name(dir), " convolution algorithm for ", p.key(),
              " within a workspace of ", format_bytes(budget), " in math mode ", math_mode_name(math_mode()),
              "; raise STRATA_CUDNN_WORKSPACE_LIMIT, free GPU memory (a smaller batch), or unset "
              "STRATA_CUDNN_DETERMINISTIC");
}

ConvAlgoChoice heuristic_choice(const ConvProblem& p, const ConvDescriptors& d, size_t budget,
                                const std::string& where) {
  ConvAlgoChoice c;
  for (ConvDirection dir : kDirections) {
    if (!heuristic_pick(dir, d, budget, p.determinism, &c[dir])) no_algorithm(dir, p, budget, where);
  }
  return c;
}

// Thrown out of the cache's measure callback when some direction could not
// be timed: the heuristic choice it carries is used, but not remembered, so
// that a later layer or run times it again.
struct NotTimed {
  ConvAlgoChoice choice;
};

// One FindEx per direction. A call that fails as a whole, or offers nothing
// usable, falls back to the heuristic for that direction (one warning line),
// and so does a device too full for the scratch buffers: a measurement that
// cannot run must not stop training. Throws NotTimed then.
ConvAlgoChoice measure_choice(const ConvProblem& p, const ConvDescriptors& d, const ConvBuffers& b, size_t budget,
                              const std::string& where) {
  const int device = current_device();
  cudnnHandle_t h = cudnn_handle();
  for (ConvDirection dir : kDirections) set_math(d, dir, static_cast<cudnnMathType_t>(p.math));
  // The find workspace: as much as the hungriest candidate wants, within the
  // budget; more would be allocated only to sit idle.
  size_t want = 0;
  for (ConvDirection dir : kDirections) {
    for (int algo = 0; algo < conv_algo_count(dir); ++algo) {
      size_t bytes = 0;
      if (workspace_size(dir, algo, d, &bytes) == CUDNN_STATUS_SUCCESS && bytes <= budget) want = std::max(want, bytes);
    }
  }
  // The forward output doubles as the top gradient of the backward
  // measurements; the layer's own tops and gradients are left alone.
  std::unique_ptr<Scratch> y, dx, dw, x_zeros, w_zeros;
  const void* x = b.x;
  const void* w = b.w;
  try {
    y = std::make_unique<Scratch>(b.y_bytes, device);
    dx = std::make_unique<Scratch>(b.x_bytes, device);
    dw = std::make_unique<Scratch>(b.w_bytes, device);
    // No input or weights given: zeros of their sizes.
    if (!x) {
      x_zeros = std::make_unique<Scratch>(b.x_bytes, device);
      STRATA_CUDA_CHECK(cudaMemsetAsync(x_zeros->get(), 0, b.x_bytes, compute_stream()));
      x = x_zeros->get();
    }
    if (!w) {
      w_zeros = std::make_unique<Scratch>(b.w_bytes, device);
      STRATA_CUDA_CHECK(cudaMemsetAsync(w_zeros->get(), 0, b.w_bytes, compute_stream()));
      w = w_zeros->get();
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "warning: %s: no GPU memory to time convolution algorithms (%s); taking cuDNN's heuristic "
                 "choice\n", where.c_str(), e.what());
    y.reset();
    dx.reset();
    dw.reset();
    x_zeros.reset();
    w_zeros.reset();
    throw NotTimed{heuristic_choice(p, d, budget, where)};
  }
  Scratch ws = Scratch::at_most(want, device);
  const size_t ws_bytes = ws.bytes();

  ConvAlgoChoice c;
  int n = 0;
  bool found[kConvDirections] = {false, false, false};
  cudnnStatus_t status[kConvDirections];
  {
    cudnnConvolutionFwdAlgoPerf_t perf[kMaxAlgos];
    status[idx(kFwd)] = cudnnFindConvolutionForwardAlgorithmEx(h, d.x, x, d.w, w, d.conv[idx(kFwd)], d.y, y->get(),
                                                               kMaxAlgos, &n, perf, ws.get(), ws_bytes);
    found[idx(kFwd)] = status[idx(kFwd)] == CUDNN_STATUS_SUCCESS &&
                       leanest_near_fastest(perf, n, ws_bytes, p.determinism, p.time_slack_percent, &c[kFwd]);
  }
  {
    cudnnConvolutionBwdDataAlgoPerf_t perf[kMaxAlgos];
    status[idx(kBwdData)] = cudnnFindConvolutionBackwardDataAlgorithmEx(
        h, d.w, w, d.y, y->get(), d.conv[idx(kBwdData)], d.x, dx->get(), kMaxAlgos, &n, perf, ws.get(), ws_bytes);
    found[idx(kBwdData)] = status[idx(kBwdData)] == CUDNN_STATUS_SUCCESS &&
                           leanest_near_fastest(perf, n, ws_bytes, p.determinism, p.time_slack_percent, &c[kBwdData]);
  }
  {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[kMaxAlgos];
    status[idx(kBwdFilter)] = cudnnFindConvolutionBackwardFilterAlgorithmEx(
        h, d.x, x, d.y, y->get(), d.conv[idx(kBwdFilter)], d.w, dw->get(), kMaxAlgos, &n, perf, ws.get(), ws_bytes);
    found[idx(kBwdFilter)] = status[idx(kBwdFilter)] == CUDNN_STATUS_SUCCESS &&
                             leanest_near_fastest(perf, n, ws_bytes, p.determinism, p.time_slack_percent, &c[kBwdFilter]);
  }
  // Timing ran on the compute stream; anything it left behind shows here.
  STRATA_CUDA_CHECK(cudaStreamSynchronize(compute_stream()));
  bool all_timed = true;
  for (ConvDirection dir : kDirections) {
    if (found[idx(dir)]) continue;
    all_timed = false;
    const cudnnStatus_t s = status[idx(dir)];
    std::fprintf(stderr, "warning: %s: timing the %s convolution algorithms gave %s; taking cuDNN's heuristic choice\n",
                 where.c_str(), conv_direction_name(dir),
                 s == CUDNN_STATUS_SUCCESS ? "no usable candidate" : cudnnGetErrorString(s));
    if (!heuristic_pick(dir, d, budget, p.determinism, &c[dir])) no_algorithm(dir, p, budget, where);
  }
  if (!all_timed) throw NotTimed{c};
  return c;
}

// A remembered or stored choice is taken when each algorithm exists, may run
// in this math mode, supports this shape, and fits the budget.
bool still_fits(const ConvAlgoChoice& c, const ConvDescriptors& d, size_t budget) {
  for (ConvDirection dir : kDirections) {
    const ConvAlgoPick& p = c[dir];
    if (p.algo < 0 || p.algo >= conv_algo_count(dir) || !math_allowed(p.math) || *conv_math_name(p.math) == '\0') {
      return false;
    }
    set_math(d, dir, run_math(p.math));
    size_t bytes = 0;
    if (workspace_size(dir, p.algo, d, &bytes) != CUDNN_STATUS_SUCCESS || bytes > budget) return false;
  }
  return true;
}

}  // namespace

std::string current_device_key() {
  static std::mutex mu;
  static std::map<int, std::string> keys;  // by device index
  const int device = current_device();
  std::lock_guard<std::mutex> lock(mu);
  auto it = keys.find(device);
  if (it != keys.end()) return it->second;
  cudaDeviceProp prop{};
  STRATA_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  int runtime = 0;
  STRATA_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  const std::string key =
      device_key(prop.name, prop.major, prop.minor, static_cast<int64_t>(cudnnGetVersion()), runtime);
  keys.emplace(device, key);
  return key;
}

ConvAlgos choose_conv_algos(const ConvProblem& problem, const ConvDescriptors& d, const ConvBuffers& b,
                            const std::string& where) {
  const ReducedDataScope data(problem.dtype != "f32");
  const ConvAlgoSettings settings = conv_algo_settings();
  const size_t budget = workspace_budget(conv_workspace_limit(settings, b.x_bytes, b.y_bytes));
  ConvProblem p = problem;
  p.determinism = settings.determinism;
  p.time_slack_percent = settings.time_slack_percent;
  ConvAlgoChoice choice;
  const char* origin = "heuristic";
  bool measured = false;
  if (settings.mode == ConvAlgoMode::kHeuristic) {
    for (ConvDirection dir : kDirections) set_math(d, dir, static_cast<cudnnMathType_t>(p.math));
    choice = heuristic_choice(p, d, budget, where);
  } else {
    try {
      const ConvAlgoLookup found = conv_algo_cache().find_or_measure(
          settings.cache_path, current_device_key(), p.key(), [&] { return measure_choice(p, d, b, budget, where); },
          [&](const ConvAlgoChoice& c) { return still_fits(c, d, budget); });
      choice = found.choice;
      origin = conv_algo_origin_name(found.origin);
      measured = found.origin == ConvAlgoOrigin::kMeasured;
    } catch (const NotTimed& fallback) {
      choice = fallback.choice;
      origin = "partly heuristic: timing failed";
      measured = true;
    }
  }
  // Each direction runs in its algorithm's math type; the workspace is what
  // the call itself asks for in that math type (estimates may differ).
  ConvAlgos a;
  ConvAlgoChoice shown = choice;
  size_t bytes[kConvDirections] = {0, 0, 0};
  for (ConvDirection dir : kDirections) {
    set_math(d, dir, run_math(choice[dir].math));
    STRATA_CUDNN_CHECK(workspace_size(dir, choice[dir].algo, d, &bytes[idx(dir)]));
    shown[dir].workspace_bytes = bytes[idx(dir)];
  }
  a.fwd = static_cast<cudnnConvolutionFwdAlgo_t>(choice[kFwd].algo);
  a.bwd_data = static_cast<cudnnConvolutionBwdDataAlgo_t>(choice[kBwdData].algo);
  a.bwd_filter = static_cast<cudnnConvolutionBwdFilterAlgo_t>(choice[kBwdFilter].algo);
  a.fwd_math = run_math(choice[kFwd].math);
  a.bwd_data_math = run_math(choice[kBwdData].math);
  a.bwd_filter_math = run_math(choice[kBwdFilter].math);
  a.fwd_bytes = bytes[idx(kFwd)];
  a.bwd_data_bytes = bytes[idx(kBwdData)];
  a.bwd_filter_bytes = bytes[idx(kBwdFilter)];
  a.description = describe(shown) + " (" + origin + ")";
  // The measurement's scratch and find workspace went back to the cache;
  // hand them to the device, so they do not stay reserved for the run.
  if (measured) empty_cache(current_device());
  return a;
}

}  // namespace strata::cuda

#endif  // STRATA_WITH_CUDA
