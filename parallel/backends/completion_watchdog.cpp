#include "parallel/backends/completion_watchdog.h"

#include <utility>

namespace strata {

CompletionWatchdog::CompletionWatchdog(OnTimeout on_timeout, std::chrono::microseconds period)
    : on_timeout_(std::move(on_timeout)), period_(period), thread_([this] { run(); }) {}

CompletionWatchdog::~CompletionWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
  for (Entry& e : entries_) {
    if (e.release) e.release();
  }
}

void CompletionWatchdog::watch(std::function<bool()> done, std::function<void()> release,
                               Clock::time_point deadline, std::string message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.push_back(Entry{std::move(done), std::move(release), deadline, std::move(message)});
  }
  changed_.notify_all();
}

size_t CompletionWatchdog::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size() + polling_;
}

bool CompletionWatchdog::drain(std::chrono::milliseconds limit) {
  std::unique_lock<std::mutex> lock(mu_);
  // A round being polled is pending too: its entries are out of entries_ then.
  return changed_.wait_for(lock, limit, [&] { return entries_.empty() && polling_ == 0; });
}

std::string CompletionWatchdog::expired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return expired_;
}

void CompletionWatchdog::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    changed_.wait(lock, [&] { return stop_ || !entries_.empty(); });
    if (stop_) return;
    // Poll outside the lock (a poll may take the owner's locks), on a copy of
    // the entries; watch() may add more meanwhile, which stay for the next round.
    std::vector<Entry> round;
    round.swap(entries_);
    polling_ = round.size();
    lock.unlock();
    std::vector<Entry> keep;
    std::vector<std::string> timeouts;
    const Clock::time_point now = Clock::now();
    for (Entry& e : round) {
      if (e.done()) {
        if (e.release) e.release();
      } else if (now > e.deadline) {
        timeouts.push_back(e.message);
        if (e.release) e.release();
      } else {
        keep.push_back(std::move(e));
      }
    }
    for (const std::string& m : timeouts) on_timeout_(m);
    lock.lock();
    polling_ = 0;
    if (!timeouts.empty() && expired_.empty()) expired_ = timeouts.front();
    for (Entry& e : keep) entries_.push_back(std::move(e));
    if (entries_.empty()) {
      changed_.notify_all();  // drain()
      continue;
    }
    changed_.wait_for(lock, period_, [&] { return stop_; });
    if (stop_) return;
  }
}

}  // namespace strata
