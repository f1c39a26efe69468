// What strata's thread pool costs per parallel_for (wake the helpers, run,
// join), and from how many elements an elementwise loop gains from a second
// thread: the measurement behind the loops' minimum chunk sizes
// (kNeuronMinChunk in layers/neuron_layer.h and the optimizers' kMinChunk).
//   strata_bench_threads [threads] [reps]
// Prints one JSON line per measurement: the empty region's cost in
// microseconds (median and minimum over reps; back to back, and after the
// helpers fell asleep), then, for ReLU-like loops of n floats, the median time
// on one thread and on `threads` threads.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "framework/cpu/threads.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// y = max(x, 0) over n floats split over the pool (min_chunk = 1: always
// split), timed `reps` times; microseconds, median.
double relu_us(const std::vector<float>& x, std::vector<float>& y, int64_t n, int reps) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    strata::parallel_for(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    });
    t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return median(t);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 2001;
  if (threads < 2 || reps < 1) {
    std::fprintf(stderr, "usage: strata_bench_threads [threads >= 2] [reps >= 1]\n");
    return 2;
  }
  strata::set_num_threads(threads);
  // The empty region, one chunk per thread: back to back (the helpers still
  // spinning from the last region) and after 1 ms idle (asleep: woken).
  std::vector<int> sink(static_cast<size_t>(threads), 0);
  for (const int idle_us : {0, 1000}) {
    std::vector<double> empty;
    for (int r = 0; r < reps; ++r) {
      if (idle_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(idle_us));
      const auto t0 = Clock::now();
      strata::parallel_for(threads, 1, [&](int64_t b, int64_t) { sink[static_cast<size_t>(b)] += 1; });
      empty.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    std::printf("{\"what\": \"empty parallel_for\", \"idle_before_us\": %d, \"threads\": %d, \"us_median\": %.2f, "
                "\"us_min\": %.2f}\n",
                idle_us, threads, median(empty), *std::min_element(empty.begin(), empty.end()));
  }
  // ReLU-like loops from 1K to 4M floats: one thread against all.
  const int64_t largest = int64_t{1} << 22;
  std::vector<float> x(static_cast<size_t>(largest)), y(static_cast<size_t>(largest));
  for (int64_t i = 0; i < largest; ++i) x[static_cast<size_t>(i)] = static_cast<float>((i * 7919) % 201 - 100);
  for (int64_t n = 1024; n <= largest; n *= 4) {
    const int loop_reps = std::max(5, static_cast<int>(reps * 1024 / n));
    strata::set_num_threads(1);
    const double one = relu_us(x, y, n, loop_reps);
    strata::set_num_threads(threads);
    const double all = relu_us(x, y, n, loop_reps);
    std::printf("{\"what\": \"relu loop\", \"floats\": %lld, \"threads\": %d, \"us_1thread\": %.2f, "
                "\"us_threads\": %.2f, \"speedup\": %.2f}\n",
                static_cast<long long>(n), threads, one, all, one / all);
  }
  return 0;
}
