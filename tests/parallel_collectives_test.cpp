// Collectives over real TCP loopback connections, with the ranks of a world
// as threads of this process (rendezvous through the in-memory store):
// every collective x dtype x size x algorithm with exact results, tags,
// async work, barrier, call checking, and the errors that reveal a stuck or
// dead peer.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "framework/error.h"
#include "parallel/collectives/collectives.h"
#include "parallel/backends/communicator_factory.h"
#include "parallel/rendezvous/env.h"
#include "parallel/collectives/reduce_kernels.h"
#include "parallel/socket/socket.h"
#include "parallel/rendezvous/store.h"
#include "parallel/backends/tcp_communicator.h"
#include "parallel/transport/tcp_transport.h"
#include "tests/parallel_test_util.h"

namespace strata::parallel {
namespace {

using namespace std::chrono_literals;
using parallel_test::connect_world;
using parallel_test::expect_no_errors;
using parallel_test::expected_reduce;
using parallel_test::filled;
using parallel_test::get_value;
using parallel_test::run_ranks;
using parallel_test::value;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<std::unique_ptr<TcpCommunicator>> make_world(int n, AllreduceAlgorithm algorithm,
                                                         std::chrono::milliseconds timeout = 20s,
                                                         CallCheck check = CallCheck::kOn) {
  auto transports = connect_world(n, timeout);
  std::vector<std::unique_ptr<TcpCommunicator>> comms;
  for (int r = 0; r < n; ++r) {
    TcpCommunicatorOptions opts;
    opts.algorithm = algorithm;
    opts.check = check;
    opts.hostname = "host-" + std::to_string(r);
    comms.push_back(std::make_unique<TcpCommunicator>(std::move(transports[static_cast<size_t>(r)]), opts));
  }
  return comms;
}

// ---------------------------------------------------------------------------
// Every collective, for 2, 3 and 4 ranks and both allreduce algorithms.

struct WorldParam {
  int world;
  AllreduceAlgorithm algorithm;
};

std::string param_name(const testing::TestParamInfo<WorldParam>& info) {
  return std::to_string(info.param.world) + "ranks_" + allreduce_algorithm_name(info.param.algorithm);
}

// Readable GetParam() in the test list (and so in the ctest names), not raw bytes.
void PrintTo(const WorldParam& p, std::ostream* os) {
  *os << p.world << " ranks, " << allreduce_algorithm_name(p.algorithm);
}

class CollectivesTest : public testing::TestWithParam<WorldParam> {
 protected:
  void SetUp() override { comms_ = make_world(GetParam().world, GetParam().algorithm); }
  int world() const { return GetParam().world; }
  void run(const std::function<void(Communicator&)>& fn) {
    expect_no_errors(run_ranks(world(), [&](int r) { fn(*comms_[static_cast<size_t>(r)]); }));
  }
  std::vector<int64_t> sizes() const { return parallel_test::test_sizes(world()); }

  std::vector<std::unique_ptr<TcpCommunicator>> comms_;
};

TEST_P(CollectivesTest, Allreduce) {
  run([&](Communicator& c) { parallel_test::check_allreduce(c, sizes()); });
}
TEST_P(CollectivesTest, Broadcast) {
  run([&](Communicator& c) { parallel_test::check_broadcast(c, sizes()); });
}
TEST_P(CollectivesTest, Reduce) {
  run([&](Communicator& c) { parallel_test::check_reduce(c, sizes()); });
}
TEST_P(CollectivesTest, Allgather) {
  run([&](Communicator& c) { parallel_test::check_allgather(c, sizes()); });
}
TEST_P(CollectivesTest, Gather) {
  run([&](Communicator& c) { parallel_test::check_gather(c, sizes()); });
}
TEST_P(CollectivesTest, Scatter) {
  run([&](Communicator& c) { parallel_test::check_scatter(c, sizes()); });
}
TEST_P(CollectivesTest, ReduceScatter) {
  run([&](Communicator& c) { parallel_test::check_reduce_scatter(c, sizes()); });
}
TEST_P(CollectivesTest, SendRecvWithTags) {
  run([&](Communicator& c) { parallel_test::check_send_recv(c, sizes()); });
}
TEST_P(CollectivesTest, AsyncWorkCompletesInIssueOrder) {
  run([&](Communicator& c) { parallel_test::check_async(c, 3000); });
}

TEST_P(CollectivesTest, BarrierWaitsForEveryRank) {
  std::atomic<int> arrived{0};
  std::atomic<int> left_early{0};
  run([&](Communicator& c) {
    for (int round = 0; round < 3; ++round) {
      // Ranks arrive at different times; nobody may leave before the last arrives.
      std::this_thread::sleep_for(std::chrono::milliseconds(20 * ((c.rank() + round) % c.world_size())));
      arrived.fetch_add(1);
      c.barrier();
      if (arrived.load() < (round + 1) * c.world_size()) left_early.fetch_add(1);
      c.barrier();  // keeps the rounds apart
    }
  });
  EXPECT_EQ(left_early.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Worlds, CollectivesTest,
    testing::Values(WorldParam{2, AllreduceAlgorithm::kRing}, WorldParam{2, AllreduceAlgorithm::kTree},
                    WorldParam{3, AllreduceAlgorithm::kRing}, WorldParam{3, AllreduceAlgorithm::kTree},
                    WorldParam{4, AllreduceAlgorithm::kRing}, WorldParam{4, AllreduceAlgorithm::kTree}),
    param_name);

// ---------------------------------------------------------------------------
// The algorithms themselves, straight over the transport (no call headers),
// at sizes that cross the segment boundaries.

TEST(Collectives, AlgorithmsOverRawTransportCrossSegments) {
  const int n = 3;
  auto transports = connect_world(n, 20s);
  // Enough f16 elements for several reduce and pipeline segments, plus a remainder.
  const int64_t count = static_cast<int64_t>(3 * kPipelineSegmentBytes / 2) + 5;
  auto errors = run_ranks(n, [&](int r) {
    Transport& t = *transports[static_cast<size_t>(r)];
    Workspace ws;
    for (DType d : {DType::kF16, DType::kI32}) {
      Tensor a = filled(count, d, r);
      allreduce_ring(t, ws, a.raw_data(), static_cast<size_t>(count), d, ReduceOp::kSum);
      Tensor b = filled(count, d, r);
      allreduce_tree(t, ws, b.raw_data(), static_cast<size_t>(count), d, ReduceOp::kMax);
      for (int64_t i = 0; i < count; ++i) {
        parallel_test::expect_eq(get_value(a, i), expected_reduce(i, n, d, ReduceOp::kSum), "ring", i);
        parallel_test::expect_eq(get_value(b, i), expected_reduce(i, n, d, ReduceOp::kMax), "tree", i);
      }
    }
    barrier_dissemination(t);
  });
  expect_no_errors(errors);
}

TEST(Collectives, SendRecvReportsProgressInOrder) {
  auto transports = connect_world(2, 20s);
  const size_t bytes = 3 << 20;
  std::vector<char> a(bytes), b(bytes, 0), c(bytes), d(bytes, 0);
  for (size_t i = 0; i < bytes; ++i) {
    a[i] = static_cast<char>(i * 31);
    c[i] = static_cast<char>(i * 17 + 1);
  }
  std::vector<std::pair<size_t, size_t>> stretches;
  auto errors = run_ranks(2, [&](int r) {
    if (r == 0) {
      transports[0]->send_recv(1, a.data(), bytes, 1, b.data(), bytes,
                               [&](size_t begin, size_t end) { stretches.emplace_back(begin, end); });
    } else {
      transports[1]->send_recv(0, c.data(), bytes, 0, d.data(), bytes, nullptr);
    }
  });
  expect_no_errors(errors);
  EXPECT_EQ(std::memcmp(b.data(), c.data(), bytes), 0);
  EXPECT_EQ(std::memcmp(d.data(), a.data(), bytes), 0);
  ASSERT_FALSE(stretches.empty());
  size_t expect_begin = 0;
  for (const auto& s : stretches) {
    EXPECT_EQ(s.first, expect_begin);
    EXPECT_GT(s.second, s.first);
    expect_begin = s.second;
  }
  EXPECT_EQ(expect_begin, bytes);
}

TEST(Collectives, PeerNamesCarryAddresses) {
  auto transports = connect_world(2, 20s);
  EXPECT_NE(transports[0]->peer_name(1).find("rank 1 (127.0.0.1:"), std::string::npos) << transports[0]->peer_name(1);
}

TEST(Collectives, AutoAlgorithmSwitchesAtThreshold) {
  auto transports = connect_world(2, 20s);
  TcpCommunicator comm(std::move(transports[0]));
  EXPECT_EQ(comm.allreduce_algorithm_for(1000), AllreduceAlgorithm::kTree);
  EXPECT_EQ(comm.allreduce_algorithm_for(64 << 20), AllreduceAlgorithm::kRing);
  EXPECT_EQ(parse_allreduce_algorithm("ring"), AllreduceAlgorithm::kRing);
  EXPECT_THROW(parse_allreduce_algorithm("butterfly"), ConfigError);
}

TEST(Collectives, AutoAlgorithmIsExactOnBothSidesOfTheThreshold) {
  auto comms = make_world(3, AllreduceAlgorithm::kAuto);
  expect_no_errors(run_ranks(3, [&](int r) {
    parallel_test::check_allreduce(*comms[static_cast<size_t>(r)], {10, 64 << 10, 100000});
  }));
}

// ---------------------------------------------------------------------------
// Kernels.

TEST(ReduceKernels, IntegerAverageTruncatesAndSumsWrap) {
  int32_t a[3] = {7, -7, 2147483647};
  const int32_t b[3] = {0, 0, 1};
  reduce_into(a, b, 3, DType::kI32, ReduceOp::kSum);
  EXPECT_EQ(a[2], -2147483647 - 1);  // wraps
  scale_average(a, 2, DType::kI32, 2);
  EXPECT_EQ(a[0], 3);
  EXPECT_EQ(a[1], -3);
  uint8_t u[2] = {250, 9};
  const uint8_t v[2] = {10, 0};
  reduce_into(u, v, 2, DType::kU8, ReduceOp::kSum);
  EXPECT_EQ(u[0], 4);  // 260 mod 256
  scale_average(u + 1, 1, DType::kU8, 2);
  EXPECT_EQ(u[1], 4);
}

TEST(ReduceKernels, HalfTypesRoundThroughF32) {
  // 2048 + 1 is not representable in f16 (spacing 2 there): rounds to even.
  Tensor a({19}, DType::kF16), b({19}, DType::kF16);
  for (int i = 0; i < 19; ++i) {
    a.data<uint16_t>()[i] = float_to_f16(2048.0f);
    b.data<uint16_t>()[i] = float_to_f16(i == 0 ? 1.0f : 3.0f);
  }
  reduce_into(a.raw_data(), b.raw_data(), 19, DType::kF16, ReduceOp::kSum);
  EXPECT_EQ(f16_to_float(a.data<uint16_t>()[0]), 2048.0f);
  for (int i = 1; i < 19; ++i) EXPECT_EQ(f16_to_float(a.data<uint16_t>()[i]), 2052.0f) << i;
  uint16_t x = float_to_bf16(3.0f);
  const uint16_t y = float_to_bf16(-1.5f);
  reduce_into(&x, &y, 1, DType::kBF16, ReduceOp::kMin);
  EXPECT_EQ(bf16_to_float(x), -1.5f);
}

// ---------------------------------------------------------------------------
// Argument and call checking.

TEST(CommunicatorChecks, MismatchedSizesAreLocalErrors) {
  auto comms = make_world(2, AllreduceAlgorithm::kRing);
  Tensor in({5}), out({9});
  try {
    comms[0]->allgather(in, out);
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("out has 9 elements"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("world_size (2) x in (5 elements"), std::string::npos) << e.what();
  }
  Tensor rs_in({6}), rs_out({2});
  EXPECT_THROW(comms[1]->reduce_scatter(rs_in, rs_out, ReduceOp::kSum), ShapeError);
  Tensor i32({10}, DType::kI32);
  Tensor f32({5});
  EXPECT_THROW(comms[0]->allgather(f32, i32), ShapeError);
  Tensor t({3});
  EXPECT_THROW(comms[0]->broadcast(t, 2), Error);
  EXPECT_THROW(comms[0]->send(t, 0, 1), Error);
  // A local error leaves the communicator usable.
  expect_no_errors(run_ranks(2, [&](int r) {
    Tensor x = filled(4, DType::kF32, r);
    comms[static_cast<size_t>(r)]->allreduce(x, ReduceOp::kSum);
  }));
}

TEST(CommunicatorChecks, CollectiveMismatchNamesBothCalls) {
  auto comms = make_world(2, AllreduceAlgorithm::kRing, 5s);
  auto errors = run_ranks(2, [&](int r) {
    Tensor t({r == 0 ? 10 : 12});
    comms[static_cast<size_t>(r)]->allreduce(t, ReduceOp::kSum);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("collective mismatch"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("allreduce(10 x f32, sum, ring)"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("allreduce(12 x f32, sum, ring)"), std::string::npos) << errors[r];
  }
  // Later calls fail at once, naming the first error.
  Tensor t({3});
  try {
    comms[0]->barrier();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unusable after an earlier error"), std::string::npos) << e.what();
  }
}

TEST(CommunicatorChecks, DifferentCollectivesAreDetected) {
  auto comms = make_world(3, AllreduceAlgorithm::kTree, 20s);
  const auto start = std::chrono::steady_clock::now();
  auto errors = run_ranks(3, [&](int r) {
    Tensor t({4});
    if (r == 1) {
      comms[1]->broadcast(t, 0);
    } else {
      comms[static_cast<size_t>(r)]->allreduce(t, ReduceOp::kSum);
    }
  });
  // Rank 2 follows rank 1 in the ring and sees its broadcast.
  EXPECT_NE(errors[2].find("broadcast(4 x f32, root 0)"), std::string::npos) << errors[2];
  // The failing ranks close their connections, so rank 0 learns at once
  // instead of waiting out its timeout.
  EXPECT_NE(errors[0].find("closed the connection"), std::string::npos) << errors[0];
  EXPECT_LT(seconds_since(start), 10.0);  // well within the 20 s timeout
}

TEST(CommunicatorChecks, TagMismatchIsReported) {
  auto comms = make_world(2, AllreduceAlgorithm::kRing, 5s);
  auto errors = run_ranks(2, [&](int r) {
    Tensor t({8});
    if (r == 0) {
      comms[0]->send(t, 1, 7);
    } else {
      comms[1]->recv(t, 0, 8);
    }
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_NE(errors[1].find("expected tag 8, but the next message from that rank has tag 7"), std::string::npos)
      << errors[1];
}

TEST(CommunicatorChecks, RecvSizeMismatchIsReported) {
  auto comms = make_world(2, AllreduceAlgorithm::kRing, 5s);
  auto errors = run_ranks(2, [&](int r) {
    if (r == 0) {
      Tensor t({8});
      comms[0]->send(t, 1, 3);
    } else {
      Tensor t({9}, DType::kI32);
      comms[1]->recv(t, 0, 3);
    }
  });
  EXPECT_NE(errors[1].find("the message holds 8 x f32, but the receiving tensor is 9 x i32"), std::string::npos)
      << errors[1];
}

// ---------------------------------------------------------------------------
// Dead and stuck peers.

TEST(PeerFailure, SilentPeerTimesOutNamingIt) {
  auto comms = make_world(2, AllreduceAlgorithm::kRing, 1s);
  Tensor t({16});
  const auto start = std::chrono::steady_clock::now();
  try {
    comms[1]->recv(t, 0, 1);  // rank 0 never sends
    FAIL() << "no error";
  } catch (const TimeoutError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 1 on host-1: timed out after 1 s waiting for rank 0 (127.0.0.1:"), std::string::npos)
        << what;
    EXPECT_NE(what.find("during recv"), std::string::npos) << what;
    EXPECT_NE(what.find("[in recv(16 x f32 from rank 0, tag 1)]"), std::string::npos) << what;
  }
  const double elapsed = seconds_since(start);
  EXPECT_GE(elapsed, 0.9);
  EXPECT_LT(elapsed, 6.0);  // generous: CI machines may be loaded
}

TEST(PeerFailure, StuckRankInCollectiveTimesOut) {
  auto comms = make_world(3, AllreduceAlgorithm::kRing, 1s);
  const auto start = std::chrono::steady_clock::now();
  // Rank 2 never joins the allreduce.
  auto errors = run_ranks(2, [&](int r) {
    Tensor t({1000});
    comms[static_cast<size_t>(r)]->allreduce(t, ReduceOp::kSum);
  });
  EXPECT_LT(seconds_since(start), 6.0);
  // Rank 0 receives from rank 2, its ring predecessor.
  EXPECT_NE(errors[0].find("timed out after 1 s waiting for rank 2 (127.0.0.1:"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("allreduce(1000 x f32, sum, ring)"), std::string::npos) << errors[0];
  // Rank 1 waits for rank 0: it times out too, or sees rank 0 close its
  // connections after rank 0's own timeout.
  EXPECT_NE(errors[1].find("rank 0 (127.0.0.1:"), std::string::npos) << errors[1];
}

TEST(PeerFailure, DestroyedPeerGivesClosedConnection) {
  auto comms = make_world(2, AllreduceAlgorithm::kTree, 20s);
  const auto start = std::chrono::steady_clock::now();
  auto errors = run_ranks(2, [&](int r) {
    if (r == 1) {
      std::this_thread::sleep_for(100ms);
      comms[1].reset();  // closes its sockets
      return;
    }
    Tensor t({50000});
    comms[0]->allreduce(t, ReduceOp::kSum);
  });
  EXPECT_LT(seconds_since(start), 10.0);  // well within the 20 s timeout
  EXPECT_NE(errors[0].find("rank 1 (127.0.0.1:"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("closed the connection"), std::string::npos) << errors[0];
}

TEST(PeerFailure, ConnectTimesOutNamingMissingRanks) {
  auto store = make_memory_store(500ms);
  const auto start = std::chrono::steady_clock::now();
  // Rank 2 of 3 waits for ranks 0 and 1, which never start. Rank 2 connects
  // to no one (it is the highest), so it waits in accept.
  TcpTransportOptions opts;
  opts.advertise_host = "127.0.0.1";
  opts.hostname = "host-2";
  try {
    connect_tcp_transport(*store, 2, 3, "lonely", 500ms, opts);
    FAIL() << "no error";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("waiting for ranks 0, 1 to connect"), std::string::npos) << e.what();
  }
  EXPECT_LT(seconds_since(start), 6.0);
}

// ---------------------------------------------------------------------------
// create_communicator.

RankEnv thread_env(int rank, int world, int port) {
  RankEnv env;
  env.rank = rank;
  env.world_size = world;
  env.local_rank = rank;
  env.local_world_size = world;
  env.master_host = "127.0.0.1";
  env.master_port = port;
  env.token = "factory-test";
  env.launcher = "strata";
  env.timeout = 20s;
  env.hostname = "host-" + std::to_string(rank);
  return env;
}

TEST(CommunicatorFactory, OneRankIsLocal) {
  RankEnv env;
  auto comm = create_communicator(env, CommunicatorOptions{});
  EXPECT_EQ(comm->backend_name(), "local");
  EXPECT_EQ(comm->world_size(), 1);
}

TEST(CommunicatorFactory, BadNamesAreConfigErrors) {
  RankEnv env;
  EXPECT_THROW(parse_backend_choice("carrier-pigeon", "backend"), ConfigError);
  EXPECT_THROW(parse_allreduce_algorithm("butterfly"), ConfigError);
  EXPECT_EQ(parse_backend_choice("nccl", "backend"), BackendChoice::kNccl);
  for (const std::string& name : backend_choice_names()) {
    EXPECT_EQ(backend_choice_name(parse_backend_choice(name, "backend")), name);
  }
  CommunicatorOptions opts;
  RankEnv two = thread_env(0, 2, 1);
  opts.backend = BackendChoice::kLocal;
  try {
    create_communicator(two, opts);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("one rank only"), std::string::npos) << e.what();
  }
}

TEST(CommunicatorFactory, TcpWorldThroughTheStoreServer) {
  const int n = 3;
  const int port = pick_free_port("127.0.0.1");
  std::vector<std::unique_ptr<Communicator>> comms(n);
  expect_no_errors(run_ranks(n, [&](int r) {
    CommunicatorOptions opts;
    opts.backend = BackendChoice::kTcp;
    opts.algorithm = AllreduceAlgorithm::kTree;
    comms[static_cast<size_t>(r)] = create_communicator(thread_env(r, n, port), opts);
  }));
  expect_no_errors(run_ranks(n, [&](int r) {
    Communicator& c = *comms[static_cast<size_t>(r)];
    if (c.backend_name() != "tcp" || c.rank() != r || c.world_size() != n) throw std::runtime_error("wrong world");
    parallel_test::check_allreduce(c, {5, 1000});
    c.barrier();
  }));
}

}  // namespace
}  // namespace strata::parallel
