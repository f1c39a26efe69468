#include "framework/threads.h"

#include <thread>

extern "C" void openblas_set_num_threads(int num_threads);

namespace strata {
namespace {
int g_threads = 0;  // 0: not set yet, use all cores
}

int hardware_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

void set_num_threads(int n) {
  g_threads = n <= 0 ? hardware_threads() : n;
  openblas_set_num_threads(g_threads);
  omp_set_num_threads(g_threads);
}

int num_threads() { return g_threads == 0 ? hardware_threads() : g_threads; }

}  // namespace strata
