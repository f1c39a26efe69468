// The libfabric transport (parallel/transport/fabric_transport.h) over a
// software provider (tcp, as CI has no RDMA device): every collective,
// dtype and size exact with 2, 3 and 4 ranks as threads (also with chunks
// small enough that messages end mid-chunk and the window wraps) and as
// processes through `strata launch --dp-transport rdma`; registrations not
// repeated per call; a silent peer timing out and a closed or killed peer
// failing, each named; clear errors for a missing provider or device. Skips
// with the reason in a build without libfabric.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "parallel/backends/tcp_communicator.h"
#include "parallel/rendezvous/store.h"
#include "parallel/transport/fabric_transport.h"
#include "parallel/socket/socket.h"
#include "parallel/transport/transport_select.h"
#include "tests/parallel_test_util.h"
#include "tests/process_util.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using namespace std::chrono_literals;
using parallel::Transport;

constexpr const char* kProvider = "tcp";  // a software provider every libfabric build has

#define SKIP_WITHOUT_LIBFABRIC()                                                                           \
  if (!parallel::fabric_transport_built()) {                                                               \
    GTEST_SKIP() << "built without libfabric: install libfabric-dev (tools/install_deps.sh) and re-run cmake"; \
  }

std::vector<std::unique_ptr<Transport>> connect_fabric_world(int n, std::chrono::milliseconds timeout,
                                                             size_t chunk_bytes = 1 << 20, int window = 16) {
  auto tcp = parallel_test::connect_world(n, timeout, "fabric-test");
  auto store = parallel::make_memory_store(timeout);
  std::vector<std::unique_ptr<Transport>> out(static_cast<size_t>(n));
  const auto errors = parallel_test::run_ranks(n, [&](int r) {
    parallel::FabricTransportOptions opts;
    opts.provider = kProvider;
    opts.advertise_host = "127.0.0.1";
    opts.hostname = "host-" + std::to_string(r);
    opts.chunk_bytes = chunk_bytes;
    opts.window = window;
    out[static_cast<size_t>(r)] =
        parallel::connect_fabric_transport(*store, std::move(tcp[static_cast<size_t>(r)]), "fabric", timeout, opts);
  });
  for (const auto& e : errors) {
    if (!e.empty()) throw std::runtime_error("connecting the fabric world: " + e);
  }
  return out;
}

std::vector<std::unique_ptr<Communicator>> communicators(std::vector<std::unique_ptr<Transport>> transports) {
  std::vector<std::unique_ptr<Communicator>> comms;
  for (size_t r = 0; r < transports.size(); ++r) {
    parallel::TcpCommunicatorOptions opts;
    opts.hostname = "host-" + std::to_string(r);
    comms.push_back(std::make_unique<parallel::TcpCommunicator>(std::move(transports[r]), opts));
  }
  return comms;
}

void check_all_collectives(std::vector<std::unique_ptr<Transport>> transports, int64_t large) {
  const int n = static_cast<int>(transports.size());
  auto comms = communicators(std::move(transports));
  parallel_test::expect_no_errors(
      parallel_test::run_ranks(n, [&](int r) { parallel_test::check_everything(*comms[r], large); }));
}

TEST(FabricTransport, EveryCollectiveExactAsThreads) {
  SKIP_WITHOUT_LIBFABRIC();
  for (int n : {2, 3, 4}) {
    SCOPED_TRACE(std::to_string(n) + " ranks");
    auto ts = connect_fabric_world(n, 20s);
    for (int r = 0; r < n; ++r) EXPECT_NE(parallel::fabric_provider_name(*ts[r]).find(kProvider), std::string::npos);
    EXPECT_NE(parallel::describe_transport(*ts[0]).find("rdma (libfabric tcp"), std::string::npos);
    check_all_collectives(std::move(ts), 100003);
  }
}

TEST(FabricTransport, SmallChunksEndMidChunkAndWrapTheWindow) {
  SKIP_WITHOUT_LIBFABRIC();
  // 1000-byte chunks, 3 in flight: every larger message is many chunks, the
  // last one partial (no size below is a multiple of 1000 bytes per rank).
  for (int n : {2, 3}) {
    SCOPED_TRACE(std::to_string(n) + " ranks");
    check_all_collectives(connect_fabric_world(n, 20s, 1000, 3), 30011);
  }
}

TEST(FabricTransport, RegistrationsAreNotRepeatedPerCall) {
  SKIP_WITHOUT_LIBFABRIC();
  const int n = 3;
  auto ts = connect_fabric_world(n, 20s);
  std::vector<const Transport*> raw;
  for (auto& t : ts) raw.push_back(t.get());
  auto comms = communicators(std::move(ts));
  std::vector<Tensor> buckets;
  for (int r = 0; r < n; ++r) buckets.emplace_back(Shape{1 << 18});  // 1 MiB, like a gradient bucket
  auto step = [&](int r) {
    buckets[r].fill(static_cast<float>(r + 1));
    comms[r]->allreduce(buckets[r], ReduceOp::kSum);
    comms[r]->broadcast(buckets[r], 0);
    if (buckets[r].data<float>()[12345] != 6.0f) throw std::runtime_error("wrong allreduce result");
  };
  parallel_test::expect_no_errors(parallel_test::run_ranks(n, step));
  std::vector<size_t> after_first;
  for (int r = 0; r < n; ++r) {
    after_first.push_back(parallel::fabric_registration_count(*raw[r]));
    EXPECT_GT(after_first.back(), 0u) << "rank " << r;
  }
  for (int i = 0; i < 10; ++i) parallel_test::expect_no_errors(parallel_test::run_ranks(n, step));
  for (int r = 0; r < n; ++r) EXPECT_EQ(parallel::fabric_registration_count(*raw[r]), after_first[r]) << "rank " << r;
}

TEST(FabricTransport, SilentPeerTimesOutNamingIt) {
  SKIP_WITHOUT_LIBFABRIC();
  auto ts = connect_fabric_world(2, 10s);
  ts[0]->set_timeout(300ms);
  std::vector<char> buf(100000);
  const auto start = parallel::Clock::now();
  try {
    ts[0]->recv(1, buf.data(), buf.size());
    FAIL() << "recv from a silent peer returned";
  } catch (const parallel::TimeoutError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 0 on host-0: timed out after"), std::string::npos) << what;
    EXPECT_NE(what.find("waiting for rank 1 (127.0.0.1:"), std::string::npos) << what;
    EXPECT_NE(what.find("received 0 of 100000 bytes"), std::string::npos) << what;
  }
  const double took = std::chrono::duration<double>(parallel::Clock::now() - start).count();
  EXPECT_GE(took, 0.25);
  EXPECT_LT(took, 3.0);
  // After an error the transport refuses further use instead of mixing streams.
  EXPECT_THROW(ts[0]->send(1, buf.data(), 10), parallel::NetworkError);
}

TEST(FabricTransport, ClosedPeerFailsAtOnceNamingIt) {
  SKIP_WITHOUT_LIBFABRIC();
  auto ts = connect_fabric_world(2, 20s);
  std::thread closer([&] {
    std::this_thread::sleep_for(100ms);
    ts[1].reset();
  });
  std::vector<char> buf(1000);
  const auto start = parallel::Clock::now();
  try {
    ts[0]->recv(1, buf.data(), buf.size());
    ADD_FAILURE() << "recv from a closed peer returned";
  } catch (const parallel::NetworkError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 0 on host-0: rank 1 (127.0.0.1:"), std::string::npos) << what;
    EXPECT_NE(what.find("closed the connection"), std::string::npos) << what;
  }
  closer.join();
  EXPECT_LT(std::chrono::duration<double>(parallel::Clock::now() - start).count(), 5.0);
}

TEST(FabricTransport, UnknownProviderNamesWhatLibfabricFound) {
  SKIP_WITHOUT_LIBFABRIC();
  auto tcp = parallel_test::connect_world(1, 5s, "fabric-none");
  auto store = parallel::make_memory_store(5s);
  parallel::FabricTransportOptions opts;
  opts.provider = "no-such-provider";
  const std::string what = test::error_of<ConfigError>(
      [&] { parallel::connect_fabric_transport(*store, std::move(tcp[0]), "f", 5s, opts); });
  EXPECT_NE(what.find("no provider 'no-such-provider'"), std::string::npos) << what;
  EXPECT_NE(what.find("it found: "), std::string::npos) << what;
  EXPECT_NE(what.find("tcp"), std::string::npos) << what;
}

TEST(FabricTransport, RdmaWithoutDeviceSaysWhatToDo) {
  SKIP_WITHOUT_LIBFABRIC();
  if (parallel::fabric_rdma_device_present()) GTEST_SKIP() << "this machine has an RDMA device";
  auto tcp = parallel_test::connect_world(1, 5s, "fabric-verbs");
  auto store = parallel::make_memory_store(5s);
  parallel::FabricTransportOptions opts;
  opts.provider = "verbs";
  const std::string what = test::error_of<ConfigError>(
      [&] { parallel::connect_fabric_transport(*store, std::move(tcp[0]), "f", 5s, opts); });
  EXPECT_NE(what.find("found no RDMA device"), std::string::npos) << what;
  EXPECT_NE(what.find("it found: "), std::string::npos) << what;
  EXPECT_NE(what.find("STRATA_FABRIC_PROVIDER=tcp"), std::string::npos) << what;
}

TEST(FabricTransport, BuildWithoutLibfabricRefusesRdmaClearly) {
  if (parallel::fabric_transport_built()) GTEST_SKIP() << "this build has libfabric";
  auto store = parallel::make_memory_store(5s);
  parallel::TransportSetup setup;
  setup.choice = parallel::TransportChoice::kRdma;
  const std::string what = test::error_of<ConfigError>([&] { parallel::connect_transport(*store, 0, 2, 5s, setup); });
  EXPECT_NE(what.find("built without libfabric"), std::string::npos) << what;
  EXPECT_NE(what.find("libfabric-dev"), std::string::npos) << what;
}

TEST(TransportChoice, NamesParseAndBadOnesListTheKnown) {
  for (const std::string& name : parallel::transport_choice_names()) {
    EXPECT_EQ(parallel::transport_choice_name(parallel::parse_transport_choice(name, "x")), name);
  }
  const std::string what =
      test::error_of<ConfigError>([] { parallel::parse_transport_choice("infiniband", "--dp-transport"); });
  EXPECT_NE(what.find("--dp-transport: transport must be one of auto, tcp, shm, rdma, got 'infiniband'"),
            std::string::npos)
      << what;
}

// ---- ranks as processes, through strata launch --dp-transport rdma ----

std::string read_file(const std::string& path);

// Loading libfabric (its provider libraries' constructors) installs signal
// handlers; the transport puts the process's own back (strata train's Ctrl-C
// snapshot, an ignored SIGTERM). In a fresh process: it loads once.
TEST(FabricTransport, FirstProviderLookupKeepsSignalHandlers) {
  SKIP_WITHOUT_LIBFABRIC();
  test::TempDir dir("strata_fabric");
  const pid_t pid = test::spawn_process({STRATA_PARALLEL_WORKER, "signals"}, {}, dir.path() + "/out.txt");
  EXPECT_EQ(test::wait_for_process(pid, std::chrono::steady_clock::now() + 30s), 0) << read_file(dir.path() + "/out.txt");
  EXPECT_NE(read_file(dir.path() + "/out.txt").find("signals kept"), std::string::npos)
      << read_file(dir.path() + "/out.txt");
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class FabricProcessTest : public testing::TestWithParam<int> {};

TEST_P(FabricProcessTest, EveryCollectiveExact) {
  SKIP_WITHOUT_LIBFABRIC();
  const int n = GetParam();
  test::TempDir dir("strata_fabric");
  const pid_t pid = test::spawn_process({STRATA_BINARY, "launch", "--nproc", std::to_string(n), "--timeout", "30",
                                         "--dp-transport", "rdma", "--", STRATA_PARALLEL_WORKER, "check", "ring"},
                                        {std::string("STRATA_FABRIC_PROVIDER=") + kProvider},
                                        dir.path() + "/launch.log");
  const int status = test::wait_for_process(pid, std::chrono::steady_clock::now() + std::chrono::seconds(120));
  const std::string out = read_file(dir.path() + "/launch.log");
  EXPECT_EQ(status, 0) << out;
  for (int r = 0; r < n; ++r) {
    EXPECT_NE(out.find("rank " + std::to_string(r) + ": all checks passed (ring, tcp backend, rdma (libfabric tcp"),
              std::string::npos)
        << out;
  }
}

INSTANTIATE_TEST_SUITE_P(SoftwareProvider, FabricProcessTest, testing::Values(2, 3, 4),
                         [](const testing::TestParamInfo<int>& info) { return std::to_string(info.param) + "procs"; });

// SIGKILL one rank while all allreduce in a loop over the fabric: the others
// fail within the timeout naming the dead peer.
TEST(FabricProcessFailure, KilledRankIsNamed) {
  SKIP_WITHOUT_LIBFABRIC();
  const int n = 3;
  test::TempDir dir("strata_fabric");
  const parallel::StoreServer store("127.0.0.1", 0, "fabric-test-token");
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pids.push_back(test::spawn_process(
        {STRATA_PARALLEL_WORKER, "loop", "ring", dir.path()},
        {"STRATA_RANK=" + std::to_string(r), "STRATA_WORLD_SIZE=" + std::to_string(n),
         "STRATA_LOCAL_RANK=" + std::to_string(r), "STRATA_LOCAL_WORLD_SIZE=" + std::to_string(n),
         "STRATA_MASTER=127.0.0.1:" + std::to_string(store.port()), "STRATA_TOKEN=fabric-test-token",
         "STRATA_STORE_HOST=launcher", "STRATA_TIMEOUT_S=10", "STRATA_DP_TRANSPORT=rdma",
         std::string("STRATA_FABRIC_PROVIDER=") + kProvider},
        dir.path() + "/rank" + std::to_string(r) + ".log"));
  }
  const auto ready_deadline = std::chrono::steady_clock::now() + 30s;
  for (int r = 0; r < n; ++r) {
    struct stat st {};
    while (stat((dir.path() + "/rank" + std::to_string(r)).c_str(), &st) != 0 &&
           std::chrono::steady_clock::now() < ready_deadline) {
      std::this_thread::sleep_for(5ms);
    }
  }
  std::this_thread::sleep_for(50ms);
  kill(pids[1], SIGKILL);
  const auto killed_at = std::chrono::steady_clock::now();
  std::vector<int> status(n);
  for (int r = 0; r < n; ++r) status[r] = test::wait_for_process(pids[r], killed_at + 20s);
  EXPECT_EQ(status[1], 128 + SIGKILL);
  for (int r : {0, 2}) {
    const std::string out = read_file(dir.path() + "/rank" + std::to_string(r) + ".log");
    EXPECT_EQ(status[r], 1) << "rank " << r << ":\n" << out;
    EXPECT_NE(out.find("rank " + std::to_string(r) + " on "), std::string::npos) << out;
  }
  // Rank 2 receives from rank 1 in the ring: it names the dead rank.
  const std::string out2 = read_file(dir.path() + "/rank2.log");
  EXPECT_NE(out2.find("rank 1 (127.0.0.1:"), std::string::npos) << out2;
  EXPECT_TRUE(out2.find("closed the connection") != std::string::npos ||
              out2.find("timed out after") != std::string::npos)
      << out2;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count(), 11.0);
}

}  // namespace
}  // namespace strata
