// What the throughput benchmarks (strata_bench_train, strata_bench_infer)
// share: the device they run on, its peak memory per model, synthetic
// inputs, and the median of their timed runs.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "framework/error.h"
#include "framework/net.h"
#include "framework/rng.h"
#include "framework/tensor.h"
#ifdef STRATA_WITH_CUDA
#include "framework/cuda/device_api.h"
#include "framework/cuda/runtime.h"
#endif

namespace strata::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Makes `device` current; ConfigError for a GPU in a build without CUDA.
inline void use_device(const Device& device) {
#ifdef STRATA_WITH_CUDA
  if (!device.is_cpu()) cuda::set_device(device.index);
#else
  if (!device.is_cpu()) fail<ConfigError>("--device ", device.str(), ": this build has no CUDA backend");
#endif
}

// Before each model: the previous model's memory goes back and the peak
// starts again, so each model reports its own.
inline void reset_peak_memory(const Device& device) {
#ifdef STRATA_WITH_CUDA
  if (!device.is_cpu()) {
    cuda::release_workspace(device.index);  // the last model's: not this one's
    cuda::empty_cache(device.index);
    cuda::reset_peak_memory_stats(device.index);
  }
#else
  (void)device;
#endif
}

// Starts the peak over again from what is allocated now (the cache stays).
inline void restart_peak_memory(const Device& device) {
#ifdef STRATA_WITH_CUDA
  if (!device.is_cpu()) cuda::reset_peak_memory_stats(device.index);
#else
  (void)device;
#endif
}

struct PeakMemory {
  size_t allocated = 0;  // bytes; 0 on the CPU
  size_t reserved = 0;
};

inline PeakMemory peak_memory(const Device& device) {
  PeakMemory p;
#ifdef STRATA_WITH_CUDA
  if (!device.is_cpu()) {
    const cuda::AllocatorStats st = cuda::memory_stats(device.index);
    p.allocated = st.peak_allocated_bytes;
    p.reserved = st.peak_reserved_bytes;
  }
#else
  (void)device;
#endif
  return p;
}

// Waits for the work queued on `device` (the last pass is queued, not done).
inline void wait_for(const Device& device) {
#ifdef STRATA_WITH_CUDA
  if (!device.is_cpu()) cuda::synchronize(device.index);
#else
  (void)device;
#endif
}

// Standard normal values in `blob`'s data, made on the host and copied to its device once.
inline void fill_gaussian(Blob& blob, Rng& rng) {
  Tensor x(blob.shape());
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = rng.gaussian(0.0f, 1.0f);
  blob.data.copy_from(x);
}

}  // namespace strata::bench
