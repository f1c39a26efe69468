#include "framework/cuda/device_timeline.h"

#include <cmath>

#include "framework/timeline.h"

namespace strata::cuda {

int64_t device_time_us(int64_t anchor_us, float ms_before_anchor) {
  return anchor_us - static_cast<int64_t>(std::llround(static_cast<double>(ms_before_anchor) * 1000.0));
}

}  // namespace strata::cuda

#ifdef STRATA_WITH_CUDA

#include "framework/cuda/runtime.h"

namespace strata::cuda {

namespace {
// Spans pending before begin() flushes on its own: a step of a large net has
// a few thousand; a run that never ends a step (strata time) stays bounded.
constexpr size_t kMaxPendingEvents = 1 << 16;
}  // namespace

DeviceTimeline::DeviceTimeline(int device) : device_(device), lane_("GPU cuda:" + std::to_string(device)) {
  const DeviceGuard guard(device_);
  STRATA_CUDA_CHECK(cudaEventCreate(&anchor_));
}

DeviceTimeline::~DeviceTimeline() {
  // Destructors never throw: a failure here leaks an event at worst.
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  if (anchor_) cudaEventDestroy(anchor_);
}

cudaEvent_t DeviceTimeline::event(size_t i) {
  while (events_.size() <= i) {
    cudaEvent_t e = nullptr;
    STRATA_CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
  }
  return events_[i];
}

int DeviceTimeline::begin() {
  if (next_ + 2 > kMaxPendingEvents) flush();
  const DeviceGuard guard(device_);
  const size_t i = next_++;
  STRATA_CUDA_CHECK(cudaEventRecord(event(i), compute_stream()));
  return static_cast<int>(i);
}

void DeviceTimeline::end(int token, const char* category, const std::string& name) {
  const DeviceGuard guard(device_);
  const size_t i = next_++;
  STRATA_CUDA_CHECK(cudaEventRecord(event(i), compute_stream()));
  pending_.push_back({static_cast<size_t>(token), i, category, name});
}

void DeviceTimeline::flush() {
  if (pending_.empty()) {
    next_ = 0;
    return;
  }
  const DeviceGuard guard(device_);
  STRATA_CUDA_CHECK(cudaEventRecord(anchor_, compute_stream()));
  STRATA_CUDA_CHECK(cudaEventSynchronize(anchor_));
  const int64_t anchor_us = Timeline::now_us();
  for (const Pending& p : pending_) {
    float begin_ms = 0.0f, end_ms = 0.0f;
    STRATA_CUDA_CHECK(cudaEventElapsedTime(&begin_ms, events_[p.begin], anchor_));
    STRATA_CUDA_CHECK(cudaEventElapsedTime(&end_ms, events_[p.end], anchor_));
    Timeline::record(p.category, p.name, device_time_us(anchor_us, begin_ms), device_time_us(anchor_us, end_ms),
                     lane_.c_str());
  }
  pending_.clear();
  next_ = 0;
}

}  // namespace strata::cuda

#endif  // STRATA_WITH_CUDA
