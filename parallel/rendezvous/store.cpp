// The rendezvous store: the in-process map for threads and the barrier built
// on any Store. The TCP server and client speaking the protocol in store.h
// live in store_server.cpp and store_client.cpp; the wire format in
// store_protocol.h.
#include "parallel/rendezvous/store.h"

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>

#include "framework/error.h"
#include "parallel/socket/socket.h"
#include "parallel/rendezvous/store_protocol.h"

namespace strata::parallel {

namespace {

using namespace store_protocol;

// ---- in-process store ---------------------------------------------------------

class MemoryStore final : public Store {
 public:
  explicit MemoryStore(std::chrono::milliseconds timeout) : timeout_(timeout) {}

  void set(const std::string& key, const std::string& value) override {
    check_sizes(key, value.size());
    std::lock_guard<std::mutex> lock(mu_);
    throw_if_failed_locked();
    data_[key] = value;
    cv_.notify_all();
  }

  std::string get(const std::string& key) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!wait_locked(lock, [&] { return failed_ || data_.count(key) > 0; })) {
      throw TimeoutError("timed out after " + format_duration(timeout_) + " waiting for key '" + key +
                         "' in the in-process store");
    }
    throw_if_failed_locked();
    return data_.at(key);
  }

  int64_t add(const std::string& key, int64_t delta) override {
    check_sizes(key, 0);
    std::lock_guard<std::mutex> lock(mu_);
    throw_if_failed_locked();
    auto it = data_.find(key);
    std::string result;
    if (!add_to(it == data_.end() ? nullptr : &it->second, key, delta, &result)) fail<Error>(result);
    data_[key] = result;
    cv_.notify_all();
    return std::stoll(result);
  }

  bool check(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    throw_if_failed_locked();
    return data_.count(key) > 0;
  }

  void wait(const std::vector<std::string>& keys) override {
    std::unique_lock<std::mutex> lock(mu_);
    auto all_present = [&] {
      if (failed_) return true;
      for (const auto& k : keys) {
        if (!data_.count(k)) return false;
      }
      return true;
    };
    if (wait_locked(lock, all_present)) {
      throw_if_failed_locked();
      return;
    }
    std::vector<std::string> missing;
    for (const auto& k : keys) {
      if (!data_.count(k)) missing.push_back(k);
    }
    throw TimeoutError("timed out after " + format_duration(timeout_) + " waiting for " +
                       std::to_string(missing.size()) + " of " + std::to_string(keys.size()) +
                       " keys in the in-process store; missing " + list_keys(missing));
  }

  void set_timeout(std::chrono::milliseconds timeout) override {
    std::lock_guard<std::mutex> lock(mu_);
    timeout_ = timeout;
  }

  // The in-process store knows no ranks: `what` is recorded as given.
  void report_failure(const std::string& what) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_) failure_ = what;
    failed_ = true;
    cv_.notify_all();
  }

  void heartbeat(HeartbeatPhase, std::chrono::milliseconds) override {
    std::lock_guard<std::mutex> lock(mu_);
    throw_if_failed_locked();
  }

 private:
  void throw_if_failed_locked() const {
    if (failed_) throw JobFailedError("the job failed: " + failure_);
  }

  template <typename Pred>
  bool wait_locked(std::unique_lock<std::mutex>& lock, Pred pred) {
    const Deadline deadline = deadline_after(timeout_);
    // wait_until with time_point::max() overflows inside some libstdc++ versions.
    if (deadline == Deadline::max()) {
      cv_.wait(lock, pred);
      return true;
    }
    return cv_.wait_until(lock, deadline, pred);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> data_;
  std::chrono::milliseconds timeout_;
  bool failed_ = false;
  std::string failure_;
};

}  // namespace

// ---- barrier --------------------------------------------------------------------

void store_barrier(Store& store, const std::string& name, int rank, int world_size) {
  STRATA_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "rank ", rank, " of ", world_size);
  store.set(name + "/" + std::to_string(rank), "1");
  std::vector<std::string> keys;
  keys.reserve(world_size);
  for (int r = 0; r < world_size; ++r) keys.push_back(name + "/" + std::to_string(r));
  try {
    store.wait(keys);
  } catch (const TimeoutError& e) {
    std::vector<int> missing;
    for (int r = 0; r < world_size; ++r) {
      if (!store.check(keys[r])) missing.push_back(r);
    }
    if (missing.empty()) return;
    std::string ranks;
    constexpr size_t kShown = 32;
    for (size_t i = 0; i < missing.size() && i < kShown; ++i) ranks += (i ? ", " : "") + std::to_string(missing[i]);
    if (missing.size() > kShown) ranks += " and " + std::to_string(missing.size() - kShown) + " more";
    const bool one = missing.size() == 1;
    throw TimeoutError("barrier '" + name + "' (rank " + std::to_string(rank) + " of " + std::to_string(world_size) +
                       "): " + std::to_string(missing.size()) + (one ? " rank" : " ranks") +
                       " did not arrive: " + (one ? "rank " : "ranks ") + ranks + " (" + e.what() + ")");
  }
}

std::shared_ptr<Store> make_memory_store(std::chrono::milliseconds timeout) {
  return std::make_shared<MemoryStore>(timeout);
}

}  // namespace strata::parallel
