// CompletionWatchdog: keeps the timeouts of operations the host no longer
// waits for. A collective ordered on a device stream (CommWork::
// order_on_compute_stream: the compute stream waits for it, the host goes on)
// has nobody polling it; if a peer died it would hang the stream for good. A
// thread polls every such operation until it is done or its deadline passes,
// and then calls the owner's timeout action once (the nccl backend aborts
// its communicator, which ends the operation on the device and makes the
// owner's next call throw with the message) and releases the entry.
//
// Plain C++: what is polled and what a timeout does are the owner's
// functions, so the logic is tested without a GPU.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace strata {

class CompletionWatchdog {
 public:
  using Clock = std::chrono::steady_clock;
  // Called on the watchdog's thread with the expired operation's message.
  using OnTimeout = std::function<void(const std::string& message)>;

  explicit CompletionWatchdog(OnTimeout on_timeout,
                              std::chrono::microseconds period = std::chrono::microseconds(200));
  // Stops the thread; entries still pending are released without a verdict.
  ~CompletionWatchdog();
  CompletionWatchdog(const CompletionWatchdog&) = delete;
  CompletionWatchdog& operator=(const CompletionWatchdog&) = delete;

  // `done` returns true once the operation has finished (or failed: the
  // owner's next call finds that out); `release` frees what it polls, once,
  // after the last poll. `message` is what a timeout says.
  void watch(std::function<bool()> done, std::function<void()> release, Clock::time_point deadline,
             std::string message);
  // Operations still being watched.
  size_t pending() const;
  // Waits (at most `limit`) until nothing is pending; false on the limit.
  bool drain(std::chrono::milliseconds limit);
  // The first timeout's message ("" when none expired).
  std::string expired() const;

 private:
  struct Entry {
    std::function<bool()> done;
    std::function<void()> release;
    Clock::time_point deadline;
    std::string message;
  };
  void run();

  OnTimeout on_timeout_;
  std::chrono::microseconds period_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::vector<Entry> entries_;
  size_t polling_ = 0;  // entries taken out of entries_ for the round being polled (pending too)
  std::string expired_;
  bool stop_ = false;
  std::thread thread_;  // last: started once the rest is ready
};

}  // namespace strata
