// One rank of a multi-process test of the tcp backend, started by
// parallel_process_test.cpp (directly or through `strata launch`) with the
// STRATA_* environment. Builds its communicator with create_communicator.
//
//   strata_parallel_worker check ALGORITHM [LARGE]
//       every collective x dtype x size (largest LARGE elements) with exact
//       results; prints "rank R: all checks passed" and exits 0.
//   strata_parallel_worker loop ALGORITHM READY_DIR
//       allreduces 1 MiB over and over (for at most 60 s), creating
//       READY_DIR/rank<R> after the first one: the test kills a rank meanwhile
//       and expects the others to fail with a clear message.
//   strata_parallel_worker bench ALGORITHM BYTES ITERATIONS
//       times f32 allreduce; rank 0 prints the bandwidth.
//   strata_parallel_worker ping ALGORITHM
//       one allreduce and a barrier; prints "rank R: ping ok, store HOST:PORT
//       (launcher|rank0)": the store the ranks met at, and who served it.
//   strata_parallel_worker signals
//       installs a SIGINT handler, makes libfabric initialise (the first
//       provider lookup) and prints "signals kept" when the handler is
//       still in place (no rank environment needed).
// Any failure: a message on stderr and exit status 1.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <string>

#include "framework/communicator.h"
#include "framework/error.h"
#include "framework/tensor.h"
#include "parallel/backends/communicator_factory.h"
#include "parallel/backends/tcp_communicator.h"
#include "parallel/transport/fabric_transport.h"
#include "parallel/rendezvous/env.h"
#include "tests/parallel_test_util.h"

using namespace strata;

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: strata_parallel_worker check ALGORITHM [LARGE]\n"
               "       strata_parallel_worker loop ALGORITHM READY_DIR\n"
               "       strata_parallel_worker bench ALGORITHM BYTES ITERATIONS\n"
               "       strata_parallel_worker ping ALGORITHM\n"
               "       strata_parallel_worker signals\n");
  return 2;
}

int run(int argc, char** argv, const parallel::RankEnv& env) {
  const std::string mode = argv[1];
  parallel::CommunicatorOptions opts;
  opts.backend = parallel::BackendChoice::kTcp;
  opts.algorithm = parallel::parse_allreduce_algorithm(argv[2]);
  // strata launch --dp-transport passes the transport on as STRATA_DP_TRANSPORT.
  if (const char* transport = std::getenv("STRATA_DP_TRANSPORT"); transport && *transport) {
    opts.transport = parallel::parse_transport_choice(transport, "STRATA_DP_TRANSPORT");
  }
  auto comm = parallel::create_communicator(env, opts);
  if (comm->world_size() != env.world_size || comm->rank() != env.rank) {
    std::fprintf(stderr, "%s: communicator reports rank %d of %d\n", env.describe().c_str(), comm->rank(),
                 comm->world_size());
    return 1;
  }

  if (mode == "check") {
    const int64_t large = argc > 3 ? std::atoll(argv[3]) : 100003;
    parallel_test::check_everything(*comm, large);
    std::printf("rank %d: all checks passed (%s, %s backend, %s)\n", env.rank, argv[2], comm->backend_name().c_str(),
                parallel::communicator_transport_name(*comm).c_str());
    return 0;
  }

  if (mode == "ping") {
    Tensor t({3});
    t.fill(1.0f);
    comm->allreduce(t, ReduceOp::kSum);
    comm->barrier();
    if (t.data<float>()[2] != static_cast<float>(env.world_size)) {
      std::fprintf(stderr, "rank %d: wrong allreduce result %g\n", env.rank, t.data<float>()[2]);
      return 1;
    }
    std::printf("rank %d: ping ok, store %s:%d (%s)\n", env.rank, env.master_host.c_str(), env.master_port,
                env.store_host == parallel::StoreHost::kLauncher ? "launcher" : "rank0");
    return 0;
  }

  if (mode == "loop" && argc > 3) {
    Tensor t({1 << 18});
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; std::chrono::steady_clock::now() - start < std::chrono::seconds(60); ++i) {
      t.fill(1.0f);
      comm->allreduce(t, ReduceOp::kSum);
      if (t.data<float>()[7] != static_cast<float>(env.world_size)) {
        std::fprintf(stderr, "rank %d: wrong allreduce result %g\n", env.rank, t.data<float>()[7]);
        return 1;
      }
      if (i == 0) std::ofstream(std::string(argv[3]) + "/rank" + std::to_string(env.rank)) << "ready\n";
    }
    std::fprintf(stderr, "rank %d: the loop ran for 60 s without an error\n", env.rank);
    return 1;
  }

  if (mode == "bench" && argc > 4) {
    const int64_t bytes = std::atoll(argv[3]);
    const int iterations = std::atoi(argv[4]);
    Tensor t({bytes / 4});
    t.fill(1.0f);
    comm->allreduce(t, ReduceOp::kSum);  // warm-up: buffers, TCP windows
    comm->barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) comm->allreduce(t, ReduceOp::kSum);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iterations;
    if (env.rank == 0) {
      // Bus bandwidth as NCCL reports it: 2 (n-1)/n bytes per rank per byte of data.
      const int n = env.world_size;
      std::printf("allreduce %s %lld bytes x %d ranks: %.3f ms, algbw %.2f GB/s, busbw %.2f GB/s\n", argv[2],
                  static_cast<long long>(bytes), n, s * 1e3, static_cast<double>(bytes) / s / 1e9,
                  static_cast<double>(bytes) / s / 1e9 * 2.0 * (n - 1) / n);
    }
    return 0;
  }
  return usage();
}

}  // namespace

void on_sigint(int) {}

// libfabric's first provider lookup must leave the process's signal handlers alone.
int check_signals() {
  struct sigaction mine {};
  mine.sa_handler = on_sigint;
  sigaction(SIGINT, &mine, nullptr);
  const std::string found = parallel::fabric_providers_found();
  struct sigaction now {};
  sigaction(SIGINT, nullptr, &now);
  if (now.sa_handler != on_sigint) {
    std::fprintf(stderr, "looking up libfabric providers (%s) replaced the SIGINT handler\n", found.c_str());
    return 1;
  }
  std::printf("signals kept (providers: %s)\n", found.c_str());
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "signals") return check_signals();
  if (argc < 3) return usage();
  std::string who = "strata_parallel_worker";
  try {
    const parallel::RankEnv env = parallel::detect_rank_env();
    who = env.describe();
    return run(argc, argv, env);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", who.c_str(), e.what());
    return 1;
  }
}
