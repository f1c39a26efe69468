// The parameter server's pieces in one process: the key layout (balanced
// shards, tensors cut into ranges), the parameter table and its first
// difference, and a ShardServer serving workers over real pair transports:
// the update rules of SYNC and ASYNC against hand-computed SGD, and wire
// input that must be refused without harming the other workers (wrong
// token, wrong magic, an oversized length, a truncated message).
// End-to-end runs (SYNC == allreduce, ASYNC/SSP accuracy, killed workers and
// servers) are in tests/cli/parameter_server_test.sh.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "framework/io/wire_format.h"
#include "parallel/parameter_server/key_layout.h"
#include "parallel/parameter_server/ps_protocol.h"
#include "parallel/parameter_server/ps_server.h"
#include "parallel/parameter_server/ps_worker.h"
#include "parallel/rendezvous/store.h"

namespace strata::parallel {
namespace {

using std::chrono::milliseconds;

PsParam param(const std::string& name, int64_t n, bool updated) {
  PsParam p;
  p.name = name;
  p.shape = {n};
  p.updated = updated;
  return p;
}

// A lost server is named by its role in the job's failure message (the
// store names ranks only): "server 0 (rank 2) on vm", workers unchanged.
TEST(PsRoles, FailureMessagesNameServersByTheirRole) {
  PsRoles r;
  r.workers = 2;
  r.servers = 2;
  r.shards = 2;
  r.placement = PsPlacement::kSharded;
  EXPECT_EQ(r.name_servers("rank 1 on vm: the job failed: rank 2 on vm closed its connection to the store"),
            "rank 1 on vm: the job failed: server 0 (rank 2) on vm closed its connection to the store");
  EXPECT_EQ(r.name_servers("rank 3 on b sent no heartbeat for 5 s"), "server 1 (rank 3) on b sent no heartbeat for 5 s");
  EXPECT_EQ(r.name_servers("rank 0 on vm failed; rank 2 left"), "rank 0 on vm failed; rank 2 left");  // no host: as is
  EXPECT_EQ(r.name_servers("worker rank 12 on x"), "worker rank 12 on x");  // rank 12 serves nothing
  EXPECT_EQ(r.name_servers("prank 2 on x, rank "), "prank 2 on x, rank ");
  r.placement = PsPlacement::kColocated;
  r.shards = 2;
  EXPECT_EQ(r.name_servers("rank 1 on vm died"), "server 1 (rank 1) on vm died");
}

TEST(PsKeyLayout, ShardsSplitTheUpdatedParametersEvenlyAndCutTensors) {
  // updated space: a (10) then c (7) = 17 floats; b is never updated.
  KeyLayout l({param("a", 10, true), param("b", 5, false), param("c", 7, true)}, 2);
  ASSERT_EQ(l.shards(), 2);
  EXPECT_EQ(l.updated_total(), 17);
  EXPECT_EQ(l.count(0), 8);  // [0, 8)
  EXPECT_EQ(l.count(1), 9);  // [8, 17)
  ASSERT_EQ(l.segments(0).size(), 1u);
  EXPECT_EQ(l.segments(0)[0].param, 0);
  EXPECT_EQ(l.segments(0)[0].end, 8);
  ASSERT_EQ(l.segments(1).size(), 2u);
  EXPECT_EQ(l.segments(1)[0].param, 0);
  EXPECT_EQ(l.segments(1)[0].begin, 8);
  EXPECT_EQ(l.segments(1)[0].offset, 0);
  EXPECT_EQ(l.segments(1)[1].param, 2);
  EXPECT_EQ(l.segments(1)[1].offset, 2);
  ASSERT_EQ(l.static_segments().size(), 1u);
  EXPECT_EQ(l.static_segments()[0].param, 1);
  EXPECT_EQ(l.static_count(), 5);
  EXPECT_NE(l.describe(1).find("a[8:10], c"), std::string::npos) << l.describe(1);
  // More shards than floats: some hold nothing, none loses anything.
  KeyLayout tiny({param("a", 2, true)}, 3);
  EXPECT_EQ(tiny.count(0) + tiny.count(1) + tiny.count(2), 2);
}

TEST(PsKeyLayout, TableRoundTripsAndNamesTheFirstDifference) {
  std::vector<PsParam> a = {param("conv.weight", 12, true), param("bn.mean", 4, false)};
  a[0].lr_mult = 2.0f;
  EXPECT_EQ(serialize_ps_params(parse_ps_params(serialize_ps_params(a))), serialize_ps_params(a));
  EXPECT_EQ(first_ps_param_difference(a, a), "");
  std::vector<PsParam> b = a;
  b[0].shape = {3, 4};
  const std::string d = first_ps_param_difference(b, a);
  EXPECT_NE(d.find("parameter 0: conv.weight [3 4] lr_mult 2 decay_mult 1 here, conv.weight [12] lr_mult 2"), std::string::npos) << d;
  b = a;
  b.pop_back();
  EXPECT_NE(first_ps_param_difference(b, a).find("first missing here: bn.mean"), std::string::npos);
  EXPECT_THROW(parse_ps_params("no tabs here\n"), IoError);
}

// A shard server for two workers over an in-memory store; each worker end
// is a pair transport the test drives by hand.
struct ServedShard {
  SolverConfig config;
  std::unique_ptr<KeyLayout> layout;
  std::unique_ptr<ShardServer> server;
  std::shared_ptr<Store> store = make_memory_store(milliseconds(5000));
  std::vector<std::thread> threads;
  RankEnv env;
  static constexpr uint64_t kToken = 0x1234;

  ServedShard(PsMode mode, int workers) {
    config.lr.base_lr = 0.5;
    env.hostname = "test";
    env.timeout = milliseconds(3000);
    layout = std::make_unique<KeyLayout>(std::vector<PsParam>{param("w", 3, true), param("s", 2, false)}, 1);
    ShardServerOptions o;
    o.workers = workers;
    o.mode = mode;
    o.token = kToken;
    o.who = "server 0";
    o.timeout = milliseconds(3000);
    server = std::make_unique<ShardServer>(config, *layout, o);
    for (int w = 0; w < workers; ++w) {
      threads.emplace_back([this, w] {
        std::unique_ptr<Transport> t;
        try {
          t = connect_ps_pair(*store, 0, w, 0, env, TransportChoice::kTcp);
        } catch (const std::exception& e) {
          server->lose(w, "worker " + std::to_string(w), e.what());
          return;
        }
        server->serve(w, *t, "worker " + std::to_string(w));
      });
    }
  }
  ~ServedShard() {
    for (auto& t : threads) t.join();
  }
  std::unique_ptr<Transport> connect(int worker) { return connect_ps_pair(*store, 0, worker, 1, env, TransportChoice::kTcp); }
};

void send(Transport& t, PsOp op, int64_t a, int64_t b, const std::vector<float>& payload,
          uint64_t token = ServedShard::kToken) {
  PsHeader h;
  h.op = static_cast<uint32_t>(op);
  h.token = token;
  h.a = a;
  h.b = b;
  h.bytes = payload.size() * 4;
  send_ps_message(t, 0, h, payload.data());
}

std::vector<float> reply(Transport& t, PsOp op, size_t floats) {
  const PsHeader h = recv_ps_header(t, 0, ServedShard::kToken, "server 0");
  EXPECT_EQ(h.op, static_cast<uint32_t>(op) | kPsReply) << ps_op_name(h.op);
  EXPECT_EQ(h.bytes, floats * 4);
  std::vector<float> v(floats);
  if (floats) t.recv(0, v.data(), floats * 4);
  return v;
}

// INIT: values (3) | SGD momentum history (3) | statics (2).
std::vector<float> init_payload() { return {1, 2, 3, 0, 0, 0, 7, 8}; }

TEST(PsShardServer, AsyncAppliesEachPushAsOneNthOfAStep) {
  ServedShard shard(PsMode::kAsync, 2);
  auto w0 = shard.connect(0);
  auto w1 = shard.connect(1);
  send(*w0, PsOp::kInit, 0, 0, init_payload());
  reply(*w0, PsOp::kInit, 0);
  send(*w1, PsOp::kPull, 1, 0, {});
  EXPECT_EQ(reply(*w1, PsOp::kPull, 5), (std::vector<float>{1, 2, 3, 7, 8}));
  // lr 0.5, 2 workers: w -= 0.5 * g / 2.
  send(*w1, PsOp::kPush, 0, 0, {4, 4, 4});
  EXPECT_EQ(reply(*w1, PsOp::kPush, 3), (std::vector<float>{0, 1, 2}));
  send(*w0, PsOp::kPush, 0, 0, {0, 8, 0});
  EXPECT_EQ(reply(*w0, PsOp::kPush, 3), (std::vector<float>{0, -1, 2}));
  send(*w0, PsOp::kBye, 0, 0, {});
  send(*w1, PsOp::kBye, 0, 0, {});
  shard.threads.front().join();
  shard.threads.back().join();
  shard.threads.clear();
  EXPECT_EQ(shard.server->lost_workers(), 0);
  EXPECT_NE(shard.server->stats_json().find("\"staleness\":[1,1,"), std::string::npos) << shard.server->stats_json();
}

TEST(PsShardServer, SyncAppliesTheMeanOnceEveryWorkerPushed) {
  ServedShard shard(PsMode::kSync, 2);
  auto w0 = shard.connect(0);
  auto w1 = shard.connect(1);
  send(*w0, PsOp::kInit, 0, 0, init_payload());
  reply(*w0, PsOp::kInit, 0);
  send(*w0, PsOp::kPush, 0, 0, {2, 0, 0});
  std::vector<float> got1;
  std::thread second([&] {
    send(*w1, PsOp::kPush, 0, 0, {0, 0, 4});
    got1 = reply(*w1, PsOp::kPush, 3);
  });
  const std::vector<float> got0 = reply(*w0, PsOp::kPush, 3);  // held until worker 1 pushed
  second.join();
  // mean gradient {1, 0, 2}, lr 0.5.
  EXPECT_EQ(got0, (std::vector<float>{0.5f, 2, 2}));
  EXPECT_EQ(got1, got0);
  send(*w0, PsOp::kBye, 0, 0, {});
  send(*w1, PsOp::kBye, 0, 0, {});
}

TEST(PsShardServer, RefusesBadMessagesAndServesTheOtherWorkers) {
  struct Case {
    const char* what;
    std::function<void(Transport&)> send_bad;
  };
  const std::vector<Case> cases = {
      {"wrong token", [](Transport& t) { send(t, PsOp::kPull, 0, 0, {}, 0xbad); }},
      {"not the magic",
       [](Transport& t) {
         char junk[kPsHeaderBytes] = "GET / HTTP/1.1\r\n";
         t.send(0, junk, sizeof junk);
       }},
      {"an oversized length",
       [](Transport& t) {
         PsHeader h;
         h.op = static_cast<uint32_t>(PsOp::kPush);
         h.token = ServedShard::kToken;
         h.bytes = uint64_t{1} << 50;  // must be refused before any allocation
         char head[kPsHeaderBytes];
         wire::store_u32(head, kPsMagic);
         wire::store_u32(head + 4, h.op);
         wire::store_u64(head + 8, h.token);
         wire::store_u64(head + 16, 0);
         wire::store_u64(head + 24, 0);
         wire::store_u64(head + 32, h.bytes);
         t.send(0, head, sizeof head);
       }},
      {"a truncated message", [](Transport& t) { t.send(0, "SPS1\1\0", 6); }},
      {"an unknown kind", [](Transport& t) { send(t, static_cast<PsOp>(77), 0, 0, {}); }},
      {"INIT from a worker other than 0", [](Transport& t) { send(t, PsOp::kInit, 0, 0, init_payload()); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ServedShard shard(PsMode::kAsync, 2);
    auto w0 = shard.connect(0);
    {
      auto bad = shard.connect(1);
      c.send_bad(*bad);
    }  // a truncated message ends with the connection closing
    send(*w0, PsOp::kInit, 0, 0, init_payload());
    reply(*w0, PsOp::kInit, 0);
    send(*w0, PsOp::kPush, 0, 0, {2, 2, 2});
    // Worker 1 may not be dropped yet (a truncated message is noticed when
    // its connection closes); worker 0 is answered either way.
    const std::vector<float> got = reply(*w0, PsOp::kPush, 3);
    EXPECT_EQ(got, (std::vector<float>{0.5f, 1.5f, 2.5f}));
    send(*w0, PsOp::kBye, 0, 0, {});
    for (auto& t : shard.threads) t.join();
    shard.threads.clear();
    EXPECT_EQ(shard.server->lost_workers(), 1);
    EXPECT_NE(shard.server->stats_json().find("worker 1"), std::string::npos) << shard.server->stats_json();
  }
}

}  // namespace
}  // namespace strata::parallel
