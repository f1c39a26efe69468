// Private to the pipeline's implementation files (parallel/model_parallel/pipeline.cpp,
// parallel/model_parallel/pipeline_snapshot.cpp, parallel/model_parallel/pipeline_test_phase.cpp): the
// message tags, helpers they share and the background Sender.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "framework/error.h"
#include "parallel/model_parallel/pipeline.h"

namespace strata::parallel {

namespace pipeline_internal {

using Clock = std::chrono::steady_clock;

// Message tags: boundary b's activation is 2b, its gradient 2b + 1.
constexpr int kSetupTag = 1 << 20;
constexpr int kSnapshotTag = (1 << 20) + 1;
constexpr int kTestSetupTag = (1 << 20) + 2;
constexpr int kTestResultTag = (1 << 20) + 3;
// TEST-phase boundary b's activation (the TEST plan's boundaries).
constexpr int kTestTagBase = 1 << 19;
constexpr int kMaxDims = 8;

inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int32_t name_hash(const std::string& s);

// dst += src (f32, same size, on the host or on one CUDA device): a
// received gradient added to the blob's own.
void add_into(Tensor& dst, const Tensor& src);

// The net config a solver config trains, and the folder its paths resolve against.
std::pair<ConfigNode, std::string> train_net_config(const SolverConfig& config);

// The config of the TEST net when the run tests (test_interval > 0 and the
// config has TEST-phase layers), and the folder its paths resolve against.
bool test_net_config(const SolverConfig& config, ConfigNode& root, std::string& base_dir);

}  // namespace pipeline_internal

// Sends queued tensors in order from a thread of its own, so that the
// schedule never blocks in a send (see the header).
struct PipelineParallel::Sender {
  Communicator& comm;
  std::mutex mu;
  std::condition_variable cv;
  struct Item {
    Tensor t;
    int dst;
    int tag;
  };
  std::deque<Item> queue;
  int busy = 0;
  bool stop = false;
  std::exception_ptr error;
  std::thread thread;

  explicit Sender(Communicator& c) : comm(c), thread([this] { loop(); }) {}
  ~Sender() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv.notify_all();
    thread.join();
  }
  void loop() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty()) return;
      Item item = std::move(queue.front());
      queue.pop_front();
      ++busy;
      lock.unlock();
      try {
        if (!error) comm.send(item.t, item.dst, item.tag);
      } catch (const Error& e) {
        std::lock_guard<std::mutex> g(mu);
        error = std::make_exception_ptr(Error("send " + describe_tag(item.tag) + " to stage " +
                                              std::to_string(item.dst) + ": " + e.what()));
      } catch (...) {
        std::lock_guard<std::mutex> g(mu);
        error = std::current_exception();
      }
      lock.lock();
      --busy;
      cv.notify_all();
    }
  }
  // "the gradient of boundary #1", from the tags above.
  static std::string describe_tag(int tag) {
    if (tag >= pipeline_internal::kTestTagBase && tag < pipeline_internal::kSetupTag) {
      return "the TEST-phase activation of boundary #" + std::to_string(tag - pipeline_internal::kTestTagBase);
    }
    return std::string(tag % 2 ? "the gradient" : "the activation") + " of boundary #" + std::to_string(tag / 2);
  }
  void send(Tensor t, int dst, int tag) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (error) std::rethrow_exception(error);
      queue.push_back({std::move(t), dst, tag});
    }
    cv.notify_all();
  }
  // Waits until every queued tensor is sent (each send is bounded by the
  // communicator's timeout); rethrows a send's error.
  void flush() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return queue.empty() && busy == 0; });
    if (error) std::rethrow_exception(error);
  }
};

}  // namespace strata::parallel
