// The number of CPU threads used by GEMM and by the layers' own loops, and
// parallel_for, which runs those loops on a small thread pool (threads.cpp
// says why not OpenMP). It is the only pool: OpenBLAS runs single-threaded
// inside it (framework/cpu/math.cpp).
#pragma once

#include <cstdint>

namespace strata {

// n <= 0 means all cores. Applies to parallel_for and so to every GEMM.
void set_num_threads(int n);
int num_threads();
// The CPUs this thread may run on (its affinity mask: taskset, cpusets).
int hardware_threads();

// How parallel_for splits [0, n): into parallel_chunks(n, min_chunk, threads)
// contiguous chunks, chunk c being [n * c / chunks, n * (c + 1) / chunks).
// At most `threads` (and 1024), and 1 when n < 2 * min_chunk or threads <= 1.
int64_t parallel_chunks(int64_t n, int64_t min_chunk, int threads);

// Runs body(begin, end) once per chunk of [0, n) (see parallel_chunks, with
// num_threads()). The split depends only on n, min_chunk and the configured
// thread count, and chunk c always runs with worker_index() == c, so a body
// that accumulates into per-worker buffers gives the same sums whichever
// thread happens to run the chunk. Inside another parallel_for, or while
// another thread is using the pool, the chunks run one after another on the
// calling thread. An exception from a body is rethrown here after every
// started chunk has finished.
template <typename Body>
void parallel_for(int64_t n, int64_t min_chunk, const Body& body);

// The chunk the calling thread is running (0 outside parallel_for): an
// index into per-worker scratch sized by num_threads().
int worker_index();
// True while the calling thread runs a parallel_for chunk.
bool in_parallel_region();

namespace threads_internal {
using ChunkFn = void (*)(const void* body, int64_t begin, int64_t end);
void run_chunks(int64_t n, int64_t chunks, ChunkFn fn, const void* body);
}  // namespace threads_internal

template <typename Body>
void parallel_for(int64_t n, int64_t min_chunk, const Body& body) {
  if (n <= 0) return;
  const int64_t chunks = parallel_chunks(n, min_chunk, num_threads());
  if (chunks <= 1 && !in_parallel_region()) {
    body(int64_t{0}, n);
    return;
  }
  threads_internal::run_chunks(
      n, chunks, [](const void* b, int64_t begin, int64_t end) { (*static_cast<const Body*>(b))(begin, end); },
      &body);
}

}  // namespace strata
