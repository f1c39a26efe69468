// parallel_for on strata's own thread pool (framework/cpu/threads.cpp): every
// index once, a split that depends only on the thread count, worker_index()
// equal to the chunk, nesting, concurrent callers, exceptions, and a thread
// count that follows the CPU affinity.
#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "framework/cpu/threads.h"

namespace strata {
namespace {

class ThreadsGuard {
 public:
  explicit ThreadsGuard(int threads) : saved_(num_threads()) { set_num_threads(threads); }
  ~ThreadsGuard() { set_num_threads(saved_); }
  ThreadsGuard(const ThreadsGuard&) = delete;
  ThreadsGuard& operator=(const ThreadsGuard&) = delete;

 private:
  int saved_;
};

TEST(ParallelChunks, SplitFollowsSizeMinChunkAndThreads) {
  EXPECT_EQ(parallel_chunks(0, 1, 4), 0);
  EXPECT_EQ(parallel_chunks(1, 1, 4), 1);
  EXPECT_EQ(parallel_chunks(3, 2, 4), 1);       // n < 2 * min_chunk: inline
  EXPECT_EQ(parallel_chunks(4, 2, 4), 2);
  EXPECT_EQ(parallel_chunks(1000, 1, 4), 4);    // at most one chunk per thread
  EXPECT_EQ(parallel_chunks(1000, 1, 1), 1);
  EXPECT_EQ(parallel_chunks(1000, 0, 3), 3);    // min_chunk 0 counts as 1
  EXPECT_EQ(parallel_chunks(1000, 300, 8), 3);
  EXPECT_EQ(parallel_chunks(1 << 20, 1, 5000), 1024);  // the pool's claim slots
}

// Each index is visited once, chunk c covers [n*c/chunks, n*(c+1)/chunks)
// and runs with worker_index() == c, whichever thread runs it.
void expect_exact_cover(int64_t n, int64_t min_chunk, int threads) {
  SCOPED_TRACE("n " + std::to_string(n) + ", min_chunk " + std::to_string(min_chunk) + ", threads " +
               std::to_string(threads));
  const ThreadsGuard guard(threads);
  const int64_t chunks = parallel_chunks(n, min_chunk, threads);
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  std::vector<std::atomic<int>> chunk_runs(static_cast<size_t>(chunks));
  std::atomic<int> wrong_worker{0};
  parallel_for(n, min_chunk, [&](int64_t begin, int64_t end) {
    const int w = worker_index();
    if (w < 0 || w >= chunks || begin != n * w / chunks || end != n * (w + 1) / chunks) {
      wrong_worker.fetch_add(1);
      return;
    }
    chunk_runs[static_cast<size_t>(w)].fetch_add(1);
    for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
  });
  EXPECT_EQ(wrong_worker.load(), 0);
  for (int64_t c = 0; c < chunks; ++c) EXPECT_EQ(chunk_runs[static_cast<size_t>(c)].load(), 1) << "chunk " << c;
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += hits[static_cast<size_t>(i)].load() != 1;
  EXPECT_EQ(bad, 0) << "indices not visited exactly once";
  EXPECT_EQ(worker_index(), 0);
  EXPECT_FALSE(in_parallel_region());
}

TEST(ParallelFor, CoversEveryIndexOnceSmallAndLarge) {
  for (int threads : {1, 2, 3, 8}) {
    for (int64_t n : {1, 2, 3, 7, 64, 1000, 1 << 20}) {
      for (int64_t min_chunk : {1, 4, 4096}) expect_exact_cover(n, min_chunk, threads);
    }
  }
}

TEST(ParallelFor, ManyRegionsInARow) {
  // Back-to-back jobs: a helper that wakes late must not run a stale job.
  const ThreadsGuard guard(4);
  std::vector<int64_t> sums(4);
  for (int round = 0; round < 2000; ++round) {
    std::atomic<int64_t> sum{0};
    parallel_for(64, 1, [&](int64_t b, int64_t e) {
      int64_t s = 0;
      for (int64_t i = b; i < e; ++i) s += i + round;
      sum.fetch_add(s);
    });
    ASSERT_EQ(sum.load(), 64 * 63 / 2 + 64 * round) << "round " << round;
  }
}

TEST(ParallelFor, NestedRunsInlineWithInnerWorkerIndices) {
  const ThreadsGuard guard(4);
  std::vector<std::atomic<int>> hits(400);
  std::atomic<int> wrong{0};
  parallel_for(4, 1, [&](int64_t ob, int64_t oe) {
    const int outer = worker_index();
    for (int64_t o = ob; o < oe; ++o) {
      parallel_for(100, 1, [&](int64_t b, int64_t e) {
        if (!in_parallel_region() || worker_index() != b / 25) wrong.fetch_add(1);
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(o * 100 + i)].fetch_add(1);
      });
    }
    if (worker_index() != outer) wrong.fetch_add(1);  // restored after the inner loop
  });
  EXPECT_EQ(wrong.load(), 0);
  for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << i;
}

TEST(ParallelFor, ConcurrentCallersBothComplete) {
  // Several threads (ranks run as threads in tests) share one pool: the one
  // that finds it busy runs its chunks itself, with the same split.
  const ThreadsGuard guard(3);
  std::atomic<int> failures{0};
  auto caller = [&] {
    for (int round = 0; round < 300; ++round) {
      std::vector<std::atomic<int>> hits(999);
      std::atomic<int> wrong{0};
      parallel_for(999, 1, [&](int64_t b, int64_t e) {
        if (b != 999 * worker_index() / 3) wrong.fetch_add(1);
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
      });
      for (auto& h : hits) failures += h.load() != 1;
      failures += wrong.load();
    }
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(ParallelFor, ExceptionReachesTheCallerAndThePoolStaysUsable) {
  const ThreadsGuard guard(4);
  for (int thrower = 0; thrower < 4; ++thrower) {
    EXPECT_THROW(parallel_for(4, 1,
                              [&](int64_t b, int64_t) {
                                if (b == thrower) throw std::runtime_error("chunk failed");
                              }),
                 std::runtime_error);
    EXPECT_FALSE(in_parallel_region());
  }
  expect_exact_cover(1000, 1, 4);
}

TEST(HardwareThreads, FollowsTheAffinityMask) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  if (CPU_COUNT(&saved) < 2) GTEST_SKIP() << "this process may run on one CPU only";
  EXPECT_EQ(hardware_threads(), CPU_COUNT(&saved));
  int first = 0;
  while (!CPU_ISSET(first, &saved)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  const int pinned = hardware_threads();
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  EXPECT_EQ(pinned, 1);
}

}  // namespace
}  // namespace strata
