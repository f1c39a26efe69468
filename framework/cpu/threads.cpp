#include "framework/cpu/threads.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

// Why a pool of our own rather than `#pragma omp parallel for`: on a machine
// shared with other busy processes, libgomp's threads collapse. At the end of
// every region they spin (GOMP_SPINCOUNT, milliseconds) before sleeping, and
// the spinning thread takes the core from the thread it waits for and from
// the neighbour; and every region waits for all of its threads, so one thread
// that the scheduler has parked behind the neighbour holds up the rest. On the
// 2-core development machine the digits model ran 3.3x slower beside one
// busy process than alone, and two runs at once each 30x slower
// (docs/benchmarks.md, "Threads beside a busy process"). OMP_WAIT_POLICY=passive
// cures the spinning, but libgomp reads it in its initialiser, before main();
// even a .preinit_array function is too early (glibc's own initialiser then
// resets the environment), so a program cannot choose it for itself.
//
// This pool:
// - helpers sleep on a condition variable between regions, after at most
//   30 us of spinning (libgomp's default: 300,000 pause instructions), so an
//   idle helper costs a busy neighbour next to nothing;
// - the caller runs every chunk that no helper has started: a helper that is
//   not running (descheduled, or still waking) holds up nothing; the caller
//   waits only for chunks a helper has actually started.
//
//   caller:    publish job ── chunk 0 ── any chunk not started ── wait for the
//                                                  started ones ── return
//   helper h:  sleep ── woken ── chunk h (unless taken) ── any not started ── sleep
//
// A chunk's range and worker_index() are fixed by its number, whoever runs it,
// so results do not depend on which thread was fast.

namespace strata {
namespace {

int g_threads = 0;  // 0: not set yet, use all cores

// The pool's claim slots; more chunks than this would be more threads than
// any machine this runs on has cores.
constexpr int64_t kMaxChunks = 1024;

// How long a helper spins for the next region before it sleeps.
constexpr int kSpinMicroseconds = 30;

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

thread_local int t_worker = 0;
thread_local bool t_in_region = false;

// Sets the calling thread's chunk for the duration of one chunk.
class ChunkScope {
 public:
  explicit ChunkScope(int64_t chunk) : saved_worker_(t_worker), saved_in_region_(t_in_region) {
    t_worker = static_cast<int>(chunk);
    t_in_region = true;
  }
  ~ChunkScope() {
    t_worker = saved_worker_;
    t_in_region = saved_in_region_;
  }
  ChunkScope(const ChunkScope&) = delete;
  ChunkScope& operator=(const ChunkScope&) = delete;

 private:
  int saved_worker_;
  bool saved_in_region_;
};

void run_chunk(int64_t n, int64_t chunks, int64_t c, threads_internal::ChunkFn fn, const void* body) {
  const ChunkScope scope(c);
  fn(body, n * c / chunks, n * (c + 1) / chunks);
}

class Pool {
 public:
  // Runs the job; false when another thread is using the pool (the caller
  // then runs the chunks itself).
  bool run(int64_t n, int64_t chunks, threads_internal::ChunkFn fn, const void* body) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    ensure_helpers(static_cast<int>(chunks) - 1);
    uint64_t generation;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      job_ = Job{n, chunks, fn, body};
      error_ = nullptr;
      finished_.store(0, std::memory_order_relaxed);
      generation = ++generation_;
      published_.store(generation, std::memory_order_release);
      for (int64_t c = 0; c < chunks; ++c) slots_[c].store(generation << 1, std::memory_order_relaxed);
    }
    wake_.notify_all();
    work(0, generation, job_);
    // Every chunk is taken; wait for those that helpers are still running.
    // Brief spinning first: those chunks are usually about to end.
    for (int spin = 0; spin < 2000 && finished_.load(std::memory_order_acquire) < chunks; ++spin) {
      cpu_relax();
    }
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return finished_.load(std::memory_order_acquire) == chunks; });
    if (error_) std::rethrow_exception(error_);
    return true;
  }

 private:
  struct Job {
    int64_t n = 0;
    int64_t chunks = 0;
    threads_internal::ChunkFn fn = nullptr;
    const void* body = nullptr;
  };

  // Runs the chunks of job `generation` that nobody has taken, starting with
  // chunk `first`. Each participant starts with its own chunk (the caller 0,
  // helper h chunk h), so when all are running, chunk c runs on the same
  // thread region after region and its data stays in that core's cache; the
  // others are taken only when their owner has not started them. A chunk's
  // slot holds generation << 1 while free and | 1 once taken, so a helper
  // that wakes late (with an older generation) cannot take a later job's
  // chunk.
  void work(int64_t first, uint64_t generation, const Job& job) {
    for (int64_t k = 0; k < job.chunks; ++k) {
      const int64_t c = (first + k) % job.chunks;
      uint64_t expected = generation << 1;
      if (!slots_[c].compare_exchange_strong(expected, expected | 1, std::memory_order_acq_rel)) continue;
      try {
        run_chunk(job.n, job.chunks, c, job.fn, job.body);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
      if (finished_.fetch_add(1, std::memory_order_acq_rel) + 1 == job.chunks) {
        // The lock orders this with the caller's check before it sleeps.
        { const std::lock_guard<std::mutex> lock(mutex_); }
        done_.notify_one();
      }
    }
  }

  void helper_loop(int64_t id) {
    uint64_t seen = 0;
    for (;;) {
      Job job;
      uint64_t generation;
      // A short spin catches the next region of a layer loop without a
      // wake-up (a sleeping helper costs a futex wake and a scheduler trip);
      // short enough that a spinning helper takes little from a neighbour.
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicroseconds);
      while (published_.load(std::memory_order_acquire) == seen && std::chrono::steady_clock::now() < until) {
        for (int i = 0; i < 32; ++i) cpu_relax();
      }
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return generation_ != seen; });
        seen = generation = generation_;
        job = job_;
      }
      if (job.chunks > 0) work(id % job.chunks, generation, job);
    }
  }

  // Helpers are started on first need and live until the process exits
  // (the pool is never destroyed, so no exit-time join can hang).
  void ensure_helpers(int wanted) {
    while (static_cast<int>(helpers_.size()) < wanted) {
      const int64_t id = static_cast<int64_t>(helpers_.size()) + 1;
      helpers_.emplace_back([this, id] { helper_loop(id); });
      helpers_.back().detach();
    }
  }

  std::mutex busy_;  // one job at a time
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  Job job_;
  uint64_t generation_ = 0;
  std::atomic<uint64_t> published_{0};  // generation_, read without the lock
  std::atomic<uint64_t> slots_[kMaxChunks] = {};
  std::atomic<int64_t> finished_{0};
  std::exception_ptr error_;
  std::vector<std::thread> helpers_;
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: see ensure_helpers
  return *p;
}

}  // namespace

int64_t parallel_chunks(int64_t n, int64_t min_chunk, int threads) {
  if (n <= 0) return 0;
  if (threads <= 1 || n < 2 * min_chunk) return 1;
  const int64_t chunks = std::min<int64_t>(n / std::max<int64_t>(min_chunk, 1), threads);
  return std::min<int64_t>(chunks, kMaxChunks);
}

int worker_index() { return t_worker; }

bool in_parallel_region() { return t_in_region; }

namespace threads_internal {

void run_chunks(int64_t n, int64_t chunks, ChunkFn fn, const void* body) {
  if (chunks > 1 && !t_in_region && pool().run(n, chunks, fn, body)) return;
  for (int64_t c = 0; c < chunks; ++c) run_chunk(n, chunks, c, fn, body);
}

}  // namespace threads_internal

int hardware_threads() {
  // The CPUs this thread may run on (taskset, cpusets), not all the
  // machine's: more threads than that only take turns on the same cores.
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

void set_num_threads(int n) {
  g_threads = n <= 0 ? hardware_threads() : n;
}

int num_threads() {
  if (g_threads != 0) return g_threads;
  // Asked before every parallel region: the affinity is read once.
  static const int all = hardware_threads();
  return all;
}

}  // namespace strata
