// What the GPU did, on the timeline (strata train --timeline): a layer's
// forward or backward on the GPU is the span between two CUDA events
// recorded on the compute stream around its launches, not the host's
// launch time. Spans are turned into timeline events when the Solver ends a
// step (flush), against one anchor event:
//
//   host   |launch fwd1|launch fwd2|...|flush: record anchor, wait for it, t = now
//   GPU          |== fwd1 ==|== fwd2 ==|...|anchor
//   an event's time = t - (the milliseconds from it to the anchor)
//
// so the GPU spans share the host events' clock, to within the time the
// host takes to wake after the anchor completes (microseconds). Events are
// reused from step to step. Only compiled with CUDA.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata::cuda {
// `ms_before_anchor` milliseconds before the anchor that completed at host
// time `anchor_us`, in the timeline's microseconds (rounded to the nearest).
int64_t device_time_us(int64_t anchor_us, float ms_before_anchor);
}  // namespace strata::cuda

#ifdef STRATA_WITH_CUDA

#include <cuda_runtime.h>

namespace strata::cuda {

class DeviceTimeline {
 public:
  // Events go on `device`'s compute stream; its spans go to the lane "GPU cuda:<device>".
  explicit DeviceTimeline(int device);
  ~DeviceTimeline();
  DeviceTimeline(const DeviceTimeline&) = delete;
  DeviceTimeline& operator=(const DeviceTimeline&) = delete;

  // Records the start of a span on the compute stream; returns its token.
  int begin();
  // Records its end; the span is named when flushed.
  void end(int token, const char* category, const std::string& name);
  // Waits for the recorded work and hands its spans to the Timeline. Also
  // called by begin() when many spans are pending, so memory stays bounded.
  void flush();

 private:
  cudaEvent_t event(size_t i);

  struct Pending {
    size_t begin, end;
    const char* category;
    std::string name;
  };
  int device_;
  std::string lane_;
  std::vector<cudaEvent_t> events_;  // reused; events_[next_] is the next one to record
  size_t next_ = 0;
  std::vector<Pending> pending_;
  cudaEvent_t anchor_ = nullptr;
};

}  // namespace strata::cuda

#else

namespace strata::cuda {
// Without CUDA there is no GPU work to put on the timeline.
class DeviceTimeline {};
}  // namespace strata::cuda

#endif  // STRATA_WITH_CUDA
