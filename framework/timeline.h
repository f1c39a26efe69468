// A Chrome trace of a run (strata train --timeline FILE): what each thread
// of each rank did and when, as "complete" events that open in Perfetto
// (ui.perfetto.dev) or chrome://tracing. Recording is off unless started;
// then every Net forward and backward of a layer, every Solver step, test
// and snapshot, every allreduce bucket (from its launch to its completion, on
// a lane of its own, and the wait for it), every parameter-server push and
// wait, and every pipeline receive is an event, nested by time:
//
//   rank 0  main       |---------------- step 12 ----------------|
//                      | fwd conv1 | fwd conv2 |...| bwd conv2 |...| wait allreduce |
//           allreduce                        |==== bucket 0 ====|
//
// Times are microseconds of the system clock, so the ranks of one machine
// line up in one file. On a GPU the host events time the launches; the
// layers' GPU spans (CUDA events) go on a lane of their own
// (framework/cuda/device_timeline.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

class Timeline {
 public:
  // Starts recording in this process, as `pid` (the rank) named `process_name`.
  static void start(int pid, const std::string& process_name);
  static bool on() { return on_.load(std::memory_order_relaxed); }
  static int64_t now_us();
  // An event from begin to end on the calling thread, or on a lane of its
  // own (a named row, e.g. "allreduce") when `lane` is given.
  static void record(const char* category, const std::string& name, int64_t begin_us, int64_t end_us,
                     const char* lane = nullptr);
  // Names the calling thread's row ("main", "server 0 / worker 2").
  static void name_this_thread(const std::string& name);
  // Stops recording and returns the events as JSON objects joined by commas
  // (the body of a traceEvents array), with the process and thread names.
  static std::string take_events();
  // Writes {"traceEvents":[bodies...]} to `path` (IoError naming it).
  static void write_trace(const std::string& path, const std::vector<std::string>& bodies);

 private:
  static std::atomic<bool> on_;
};

// Records [construction, destruction) when the timeline is on.
class TimelineScope {
 public:
  TimelineScope(const char* category, const std::string& name) {
    if (Timeline::on()) {
      category_ = category;
      name_ = name;
      begin_ = Timeline::now_us();
    }
  }
  ~TimelineScope() {
    if (category_) Timeline::record(category_, name_, begin_, Timeline::now_us());
  }
  TimelineScope(const TimelineScope&) = delete;
  TimelineScope& operator=(const TimelineScope&) = delete;

 private:
  const char* category_ = nullptr;
  std::string name_;
  int64_t begin_ = 0;
};

}  // namespace strata
