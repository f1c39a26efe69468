// Allreduce bandwidth of a strata communicator (nccl-tests conventions).
// Run one process per rank:
//   strata launch --nproc 4 -- strata_bench_allreduce --backend tcp --algorithm ring
//   mpirun -np 4 strata_bench_allreduce --backend mpi
//   strata launch --nproc 4 -- strata_bench_allreduce --transport rdma   (libfabric; see docs/benchmarks.md)
// For each size (MiB of f32): `warmup` untimed then `iters` timed in-place
// sum allreduces. Before each one every rank restores its input and passes a
// barrier; an iteration's time is the slowest rank's, and the reported time
// is the median over iterations. algbw = bytes / time; busbw = algbw *
// 2(n-1)/n. Rank r's element i is h(i) + r with h(i) a small integer, so the
// exact sum n*h(i) + n(n-1)/2 is known and every result element is checked;
// `wrong` counts mismatches over all timed iterations and ranks.
// Rank 0 prints one JSON line per size (tools/bench/run_allreduce_bench.py
// collects them; gloo_allreduce_bench.py and mpi_allreduce_bench.cpp print
// the same fields).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "framework/communicator.h"
#include "framework/error.h"
#include "framework/tensor.h"
#include "parallel/backends/communicator_factory.h"
#include "parallel/rendezvous/env.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string backend = "tcp";
  std::string algorithm = "ring";
  std::string transport = "auto";
  std::vector<int> sizes_mb = {1, 16, 64, 256};
  int warmup = -1;  // -1: by size
  int iters = -1;
};

const char* kUsage =
    "usage: strata_bench_allreduce [--backend tcp|mpi] [--algorithm ring|tree|auto] [--sizes 1,16,64,256]\n"
    "                              [--transport auto|tcp|shm|rdma] [--warmup N] [--iters N]\n"
    "Run one process per rank (strata launch --nproc N -- ..., or mpirun for --backend mpi).\n";

std::vector<int> parse_sizes(const std::string& text) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = text.find(',', pos);
    const std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v <= 0 || v > 4096) {
      strata::fail<strata::ConfigError>("--sizes: '", item, "' is not a size in MiB (1..4096)");
    }
    out.push_back(static_cast<int>(v));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

int parse_count(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < 0 || v > 100000) {
    strata::fail<strata::ConfigError>(flag, ": '", text, "' is not a non-negative count");
  }
  return static_cast<int>(v);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) strata::fail<strata::ConfigError>(a, " needs a value\n", kUsage);
    const std::string v = argv[++i];
    if (a == "--backend") o.backend = v;
    else if (a == "--algorithm") o.algorithm = v;
    else if (a == "--transport") o.transport = v;
    else if (a == "--sizes") o.sizes_mb = parse_sizes(v);
    else if (a == "--warmup") o.warmup = parse_count(a, v);
    else if (a == "--iters") o.iters = parse_count(a, v);
    else strata::fail<strata::ConfigError>("unknown flag ", a, "\n", kUsage);
  }
  return o;
}

// Fewer iterations for big sizes keep a whole run within seconds on a small machine.
int default_iters(int mb) { return mb <= 1 ? 20 : mb <= 16 ? 10 : mb <= 64 ? 5 : 3; }
int default_warmup(int mb) { return mb <= 1 ? 3 : 1; }

// A small integer per position, scattered so that misplaced chunks show up.
inline float pattern(uint64_t i) {
  return static_cast<float>(static_cast<int64_t>(((i * 2654435761ull) >> 8) & 1023) - 512);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace strata;
  try {
    const Options opt = parse(argc, argv);
    const parallel::RankEnv env = parallel::detect_rank_env();
    parallel::CommunicatorOptions copts;
    copts.backend = parallel::parse_backend_choice(opt.backend, "--backend");
    copts.algorithm = parallel::parse_allreduce_algorithm(opt.algorithm);
    copts.transport = parallel::parse_transport_choice(opt.transport, "--transport");
    auto comm = parallel::create_communicator(env, copts);
    const int rank = comm->rank();
    const int world = comm->world_size();
    const std::string impl = comm->backend() != CommBackend::kTcp ? "strata-" + comm->backend_name()
                             : opt.transport == "auto" ? "strata-tcp-" + opt.algorithm
                                                       : "strata-tcp-" + opt.algorithm + "-" + opt.transport;

    for (int mb : opt.sizes_mb) {
      const int64_t n = static_cast<int64_t>(mb) * (1 << 20) / 4;
      const size_t bytes = static_cast<size_t>(n) * 4;
      const int warmup = opt.warmup >= 0 ? opt.warmup : default_warmup(mb);
      const int iters = opt.iters > 0 ? opt.iters : default_iters(mb);

      std::vector<float> input(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) input[i] = pattern(static_cast<uint64_t>(i)) + static_cast<float>(rank);
      const float offset = static_cast<float>(world * (world - 1) / 2);
      Tensor t({n}, DType::kF32);
      Tensor times({iters}, DType::kF32);
      int64_t wrong = 0;

      for (int it = 0; it < warmup + iters; ++it) {
        std::memcpy(t.raw_data(), input.data(), bytes);
        comm->barrier();
        const auto start = Clock::now();
        comm->allreduce(t, ReduceOp::kSum);
        const double s = std::chrono::duration<double>(Clock::now() - start).count();
        if (it < warmup) continue;
        times.data<float>()[it - warmup] = static_cast<float>(s);
        const float* p = t.data<float>();
        for (int64_t i = 0; i < n; ++i) {
          wrong += p[i] != static_cast<float>(world) * pattern(static_cast<uint64_t>(i)) + offset;
        }
      }
      comm->allreduce(times, ReduceOp::kMax);  // an iteration lasts as long as its slowest rank
      Tensor wrong_total({1}, DType::kI32);
      wrong_total.data<int32_t>()[0] = static_cast<int32_t>(std::min<int64_t>(wrong, INT32_MAX / world));
      comm->allreduce(wrong_total, ReduceOp::kSum);

      if (rank == 0) {
        std::vector<double> ts(times.data<float>(), times.data<float>() + iters);
        const double time_s = median(ts);
        const double algbw = static_cast<double>(bytes) / time_s / 1e9;
        const double busbw = algbw * 2.0 * (world - 1) / world;
        std::printf(
            "{\"impl\": \"%s\", \"world_size\": %d, \"size_mb\": %d, \"bytes\": %zu, \"iters\": %d, "
            "\"time_us\": %.1f, \"algbw_gbs\": %.4f, \"busbw_gbs\": %.4f, \"wrong\": %d}\n",
            impl.c_str(), world, mb, bytes, iters, time_s * 1e6, algbw, busbw, wrong_total.data<int32_t>()[0]);
        std::fflush(stdout);
      }
    }
    comm->barrier();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata_bench_allreduce: %s\n", e.what());
    return 1;
  }
  return 0;
}
