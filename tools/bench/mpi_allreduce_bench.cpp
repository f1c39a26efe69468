// The reference point for tools/bench/allreduce_bench.cpp: plain in-place
// MPI_Allreduce(MPI_FLOAT, MPI_SUM) measured the same way (restore the input,
// MPI_Barrier, time one call; slowest rank per iteration; median over
// iterations; same input pattern and exactness check; same JSON line on
// rank 0). Run under mpirun:
//   mpirun -np 4 strata_bench_mpi_allreduce [--sizes 1,16,64,256] [--warmup N] [--iters N] [--label mpi]
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

void check(int rc, const char* call, int rank) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  std::fprintf(stderr, "strata_bench_mpi_allreduce: rank %d: %s failed: %.*s\n", rank, call, len, text);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

inline float pattern(uint64_t i) {
  return static_cast<float>(static_cast<int64_t>(((i * 2654435761ull) >> 8) & 1023) - 512);
}

int default_iters(int mb) { return mb <= 1 ? 20 : mb <= 16 ? 10 : mb <= 64 ? 5 : 3; }
int default_warmup(int mb) { return mb <= 1 ? 3 : 1; }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

bool parse_int(const char* text, long lo, long hi, long* out) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  check(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank", rank);
  check(MPI_Comm_size(MPI_COMM_WORLD, &world), "MPI_Comm_size", rank);

  std::vector<int> sizes = {1, 16, 64, 256};
  long warmup_flag = -1, iters_flag = -1;
  std::string label = "mpi";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    bool ok = v != nullptr;
    if (ok && a == "--sizes") {
      sizes.clear();
      std::string s = v;
      size_t pos = 0;
      while (ok) {
        const size_t comma = s.find(',', pos);
        long mb = 0;
        ok = parse_int(s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos).c_str(), 1,
                       4096, &mb);
        sizes.push_back(static_cast<int>(mb));
        if (comma == std::string::npos) break;
        pos = comma + 1;
      }
    } else if (ok && a == "--warmup") {
      ok = parse_int(v, 0, 100000, &warmup_flag);
    } else if (ok && a == "--iters") {
      ok = parse_int(v, 1, 100000, &iters_flag);
    } else if (ok && a == "--label") {
      label = v;
    } else {
      ok = false;
    }
    if (!ok) {
      if (rank == 0) {
        std::fprintf(stderr, "strata_bench_mpi_allreduce: bad argument '%s'\nusage: strata_bench_mpi_allreduce "
                     "[--sizes 1,16,64,256] [--warmup N] [--iters N] [--label NAME]\n", a.c_str());
      }
      MPI_Finalize();
      return 2;
    }
    ++i;
  }

  for (int mb : sizes) {
    const int64_t n = static_cast<int64_t>(mb) * (1 << 20) / 4;
    if (n > INT_MAX) {
      if (rank == 0) std::fprintf(stderr, "strata_bench_mpi_allreduce: %d MiB exceeds MPI's int count\n", mb);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const size_t bytes = static_cast<size_t>(n) * 4;
    const int warmup = warmup_flag >= 0 ? static_cast<int>(warmup_flag) : default_warmup(mb);
    const int iters = iters_flag > 0 ? static_cast<int>(iters_flag) : default_iters(mb);
    std::vector<float> input(static_cast<size_t>(n)), buf(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) input[i] = pattern(static_cast<uint64_t>(i)) + static_cast<float>(rank);
    const float offset = static_cast<float>(world * (world - 1) / 2);
    std::vector<double> times(static_cast<size_t>(iters));
    long long wrong = 0;
    for (int it = 0; it < warmup + iters; ++it) {
      std::memcpy(buf.data(), input.data(), bytes);
      check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier", rank);
      const double start = MPI_Wtime();
      check(MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
            "MPI_Allreduce", rank);
      const double s = MPI_Wtime() - start;
      if (it < warmup) continue;
      times[it - warmup] = s;
      for (int64_t i = 0; i < n; ++i) {
        wrong += buf[i] != static_cast<float>(world) * pattern(static_cast<uint64_t>(i)) + offset;
      }
    }
    check(MPI_Allreduce(MPI_IN_PLACE, times.data(), iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce",
          rank);
    check(MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce", rank);
    if (rank == 0) {
      const double time_s = median(times);
      const double algbw = static_cast<double>(bytes) / time_s / 1e9;
      const double busbw = algbw * 2.0 * (world - 1) / world;
      std::printf(
          "{\"impl\": \"%s\", \"world_size\": %d, \"size_mb\": %d, \"bytes\": %zu, \"iters\": %d, "
          "\"time_us\": %.1f, \"algbw_gbs\": %.4f, \"busbw_gbs\": %.4f, \"wrong\": %lld}\n",
          label.c_str(), world, mb, bytes, iters, time_s * 1e6, algbw, busbw, wrong);
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return 0;
}
