// CompletionWatchdog (parallel/backends/completion_watchdog.h): operations
// the host no longer waits for still time out, once, with their message,
// and everything watched is released exactly once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "parallel/backends/completion_watchdog.h"

namespace strata {
namespace {

using namespace std::chrono_literals;

TEST(CompletionWatchdog, AFinishedOperationIsReleasedWithoutATimeout) {
  std::atomic<int> timeouts{0};
  CompletionWatchdog dog([&](const std::string&) { ++timeouts; });
  std::atomic<bool> finished{false};
  std::atomic<int> released{0};
  dog.watch([&] { return finished.load(); }, [&] { ++released; }, CompletionWatchdog::Clock::now() + 10s, "op");
  EXPECT_EQ(dog.pending(), 1u);
  EXPECT_FALSE(dog.drain(20ms));  // still running
  finished = true;
  EXPECT_TRUE(dog.drain(5s));
  EXPECT_EQ(released.load(), 1);
  EXPECT_EQ(timeouts.load(), 0);
  EXPECT_EQ(dog.expired(), "");
}

TEST(CompletionWatchdog, AStuckOperationTimesOutOnceWithItsMessage) {
  std::mutex mu;
  std::vector<std::string> said;
  CompletionWatchdog dog([&](const std::string& m) {
    std::lock_guard<std::mutex> lock(mu);
    said.push_back(m);
  });
  std::atomic<int> released{0};
  const auto now = CompletionWatchdog::Clock::now();
  dog.watch([] { return false; }, [&] { ++released; }, now + 30ms, "allreduce bucket 2 did not finish within 30 ms");
  dog.watch([] { return true; }, [&] { ++released; }, now + 30ms, "never said");
  ASSERT_TRUE(dog.drain(5s));
  EXPECT_EQ(released.load(), 2);
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(said.size(), 1u);
  EXPECT_EQ(said[0], "allreduce bucket 2 did not finish within 30 ms");
  EXPECT_EQ(dog.expired(), said[0]);
}

// drain() called while the watchdog polls a round (its entries are out of
// the list then) waits for that round: it once returned at once, before
// anything was released.
TEST(CompletionWatchdog, DrainWaitsForTheRoundBeingPolled) {
  CompletionWatchdog dog([](const std::string&) {});
  std::atomic<bool> polling{false};
  std::atomic<int> released{0};
  dog.watch(
      [&] {
        polling = true;
        std::this_thread::sleep_for(100ms);  // the round is being polled
        return true;
      },
      [&] { ++released; }, CompletionWatchdog::Clock::now() + 10s, "op");
  while (!polling.load()) std::this_thread::yield();
  EXPECT_EQ(dog.pending(), 1u);
  ASSERT_TRUE(dog.drain(5s));
  EXPECT_EQ(released.load(), 1);
}

TEST(CompletionWatchdog, PendingOperationsAreReleasedWhenItStops) {
  std::atomic<int> released{0};
  {
    CompletionWatchdog dog([](const std::string&) {});
    for (int k = 0; k < 3; ++k) {
      dog.watch([] { return false; }, [&] { ++released; }, CompletionWatchdog::Clock::now() + 1h, "op");
    }
  }
  EXPECT_EQ(released.load(), 3);
}

}  // namespace
}  // namespace strata
