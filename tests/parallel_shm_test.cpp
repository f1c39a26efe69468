// The shared-memory transport (parallel/transport/shm_transport.h), ranks as threads:
// every collective exact over shm (with a small ring, so messages wrap),
// a world split over two pretend hosts (shm and TCP mixed in one send_recv),
// a silent peer timing out, and a closed peer failing at once.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "parallel/transport/shm_transport.h"
#include "parallel/socket/socket.h"
#include "parallel/rendezvous/store.h"
#include "parallel/backends/tcp_communicator.h"
#include "tests/parallel_test_util.h"

namespace strata {
namespace {

using namespace std::chrono_literals;
using parallel::Transport;

// host_of(r) names rank r's pretend host.
std::vector<std::unique_ptr<Transport>> connect_shm_world(int n, std::chrono::milliseconds timeout,
                                                          const std::function<std::string(int)>& host_of) {
  auto tcp = parallel_test::connect_world(n, timeout, "shm-test");
  auto store = parallel::make_memory_store(timeout);
  std::vector<std::unique_ptr<Transport>> out(static_cast<size_t>(n));
  const auto errors = parallel_test::run_ranks(n, [&](int r) {
    parallel::ShmTransportOptions opts;
    opts.ring_bytes = 64 << 10;
    opts.hostname = "host-" + std::to_string(r);
    opts.host_id = host_of(r);
    out[static_cast<size_t>(r)] =
        parallel::connect_shm_transport(*store, std::move(tcp[static_cast<size_t>(r)]), "shm", timeout, opts);
  });
  for (const auto& e : errors) {
    if (!e.empty()) throw std::runtime_error("connecting the shm world: " + e);
  }
  return out;
}

void check_all_collectives(std::vector<std::unique_ptr<Transport>> transports) {
  const int n = static_cast<int>(transports.size());
  std::vector<std::unique_ptr<parallel::TcpCommunicator>> comms;
  for (int r = 0; r < n; ++r) {
    parallel::TcpCommunicatorOptions opts;
    opts.hostname = "host-" + std::to_string(r);
    comms.push_back(std::make_unique<parallel::TcpCommunicator>(std::move(transports[static_cast<size_t>(r)]), opts));
  }
  const auto errors = parallel_test::run_ranks(n, [&](int r) { parallel_test::check_everything(*comms[r], 100003); });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(ShmTransport, EveryCollectiveExactOnOneHost) {
  for (int n : {2, 3, 4}) {
    auto ts = connect_shm_world(n, 10s, [](int) { return std::string("one-host"); });
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(parallel::shm_peer_count(*ts[r]), n - 1);
      EXPECT_NE(ts[r]->peer_name((r + 1) % n).find("[shm]"), std::string::npos);
    }
    check_all_collectives(std::move(ts));
  }
}

TEST(ShmTransport, TwoHostsMixShmAndTcp) {
  // Ranks 0, 1 share host A, ranks 2, 3 host B: every ring step mixes paths.
  auto ts = connect_shm_world(4, 10s, [](int r) { return std::string(r < 2 ? "A" : "B"); });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(parallel::shm_peer_count(*ts[r]), 1);
  EXPECT_EQ(ts[0]->peer_name(2).find("[shm]"), std::string::npos);
  check_all_collectives(std::move(ts));
}

TEST(ShmTransport, SilentPeerTimesOutNamingIt) {
  auto ts = connect_shm_world(2, 10s, [](int) { return std::string("one-host"); });
  ts[0]->set_timeout(300ms);
  std::vector<char> buf(1000);
  const auto start = parallel::Clock::now();
  try {
    ts[0]->recv(1, buf.data(), buf.size());
    FAIL() << "recv from a silent peer returned";
  } catch (const parallel::TimeoutError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 0 on host-0: timed out after"), std::string::npos) << what;
    EXPECT_NE(what.find("waiting for rank 1 (127.0.0.1:"), std::string::npos) << what;
    EXPECT_NE(what.find("[shm]"), std::string::npos) << what;
  }
  const double took = std::chrono::duration<double>(parallel::Clock::now() - start).count();
  EXPECT_GE(took, 0.25);
  EXPECT_LT(took, 2.0);
  // A sender whose peer does not read (the ring is full) times out too.
  std::vector<char> big(1 << 20);
  EXPECT_THROW(ts[0]->send(1, big.data(), big.size()), parallel::TimeoutError);
}

TEST(ShmTransport, ClosedPeerFailsAtOnce) {
  auto ts = connect_shm_world(2, 10s, [](int) { return std::string("one-host"); });
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
    EXPECT_NE(std::string(e.what()).find("closed the connection"), std::string::npos) << e.what();
  }
  closer.join();
  EXPECT_LT(std::chrono::duration<double>(parallel::Clock::now() - start).count(), 3.0);
}

}  // namespace
}  // namespace strata
