// The rendezvous store: in-process and TCP, including refusals, limits,
// timeouts whose messages name what is missing, and many clients at once.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "parallel/socket/socket.h"
#include "parallel/rendezvous/store.h"

namespace strata::parallel {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

const std::string kToken = "0123456789abcdef0123456789abcdef";

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

// The same checks against either kind of store.
void exercise_basics(Store& s) {
  EXPECT_FALSE(s.check("a"));
  s.set("a", "hello");
  EXPECT_TRUE(s.check("a"));
  EXPECT_EQ(s.get("a"), "hello");
  s.set("a", std::string("bin\0ary", 7));
  EXPECT_EQ(s.get("a"), std::string("bin\0ary", 7));
  s.set("empty", "");
  EXPECT_EQ(s.get("empty"), "");
  EXPECT_EQ(s.add("n", 5), 5);
  EXPECT_EQ(s.add("n", -2), 3);
  EXPECT_EQ(s.get("n"), "3");
  s.set("text", "abc");
  EXPECT_NE(error_of([&] { s.add("text", 1); }).find("not an integer"), std::string::npos);
  s.wait({"a", "n", "empty"});
  s.wait({});
}

TEST(ParallelStore, MemoryBasics) {
  auto s = make_memory_store(seconds(5));
  exercise_basics(*s);
}

TEST(ParallelStore, MemoryGetBlocksUntilSet) {
  auto s = make_memory_store(seconds(10));
  const auto t0 = Clock::now();
  auto setter = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(milliseconds(100));
    s->set("late", "value");
  });
  EXPECT_EQ(s->get("late"), "value");
  EXPECT_GE(seconds_since(t0), 0.09);
  setter.get();
}

TEST(ParallelStore, MemoryWaitTimeoutNamesMissingKeys) {
  auto s = make_memory_store(milliseconds(100));
  s->set("here", "1");
  const std::string msg = error_of([&] { s->wait({"here", "gone/1", "gone/2"}); });
  EXPECT_NE(msg.find("'gone/1'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'gone/2'"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("'here'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2 of 3"), std::string::npos) << msg;
  EXPECT_THROW(s->get("nothing"), TimeoutError);
}

TEST(ParallelStore, MemoryBarrierAcrossThreads) {
  auto s = make_memory_store(seconds(10));
  std::vector<std::thread> threads;
  std::atomic<int> passed{0};
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      store_barrier(*s, "b0", r, 4);
      ++passed;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(passed.load(), 4);
}

TEST(ParallelStore, BarrierTimeoutListsMissingRanks) {
  auto s = make_memory_store(milliseconds(150));
  s->set("init/1", "1");  // ranks 1 and 3 arrived (3 below); 2 and 4 did not
  s->set("init/3", "1");
  const std::string msg = error_of([&] { store_barrier(*s, "init", 0, 5); });
  EXPECT_NE(msg.find("barrier 'init'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ranks 2, 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2 ranks did not arrive"), std::string::npos) << msg;
}

// ---- TCP ------------------------------------------------------------------------

TEST(ParallelStore, TcpBasics) {
  StoreServer server("127.0.0.1", 0, kToken);
  ASSERT_GT(server.port(), 0);
  auto s = connect_store("127.0.0.1", server.port(), kToken, 0, seconds(5));
  exercise_basics(*s);
  // A second client sees the first one's keys.
  auto t = connect_store("127.0.0.1", server.port(), kToken, 1, seconds(5));
  EXPECT_EQ(t->get("n"), "3");
  // Values well above one network packet.
  std::string big(3 << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 4099) big[i] = static_cast<char>(i);
  s->set("big", big);
  EXPECT_EQ(t->get("big"), big);
}

TEST(ParallelStore, TcpGetBlocksUntilAnotherClientSets) {
  StoreServer server("127.0.0.1", 0, kToken);
  auto reader = connect_store("127.0.0.1", server.port(), kToken, 1, seconds(10));
  auto writer = connect_store("127.0.0.1", server.port(), kToken, 0, seconds(10));
  const auto t0 = Clock::now();
  auto setter = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(milliseconds(150));
    writer->set("addr/0", "10.0.0.1:1234");
    std::this_thread::sleep_for(milliseconds(50));
    writer->add("count", 2);
  });
  EXPECT_EQ(reader->get("addr/0"), "10.0.0.1:1234");
  EXPECT_GE(seconds_since(t0), 0.14);
  reader->wait({"addr/0", "count"});
  EXPECT_EQ(reader->get("count"), "2");
  EXPECT_LT(seconds_since(t0), 5.0);
  setter.get();
}

TEST(ParallelStore, TcpTimeoutsNameKeysAndServer) {
  StoreServer server("127.0.0.1", 0, kToken);
  auto s = connect_store("127.0.0.1", server.port(), kToken, 3, milliseconds(200));
  s->set("present", "1");
  const std::string where = "127.0.0.1:" + std::to_string(server.port());

  const auto t0 = Clock::now();
  const std::string get_msg = error_of([&] { s->get("missing-key"); });
  EXPECT_LT(seconds_since(t0), 3.0);
  EXPECT_NE(get_msg.find("'missing-key'"), std::string::npos) << get_msg;
  EXPECT_NE(get_msg.find(where), std::string::npos) << get_msg;
  EXPECT_NE(get_msg.find("rank 3"), std::string::npos) << get_msg;

  const std::string wait_msg = error_of([&] { s->wait({"present", "k1", "k2"}); });
  EXPECT_NE(wait_msg.find("'k1'"), std::string::npos) << wait_msg;
  EXPECT_NE(wait_msg.find("'k2'"), std::string::npos) << wait_msg;
  EXPECT_EQ(wait_msg.find("'present'"), std::string::npos) << wait_msg;
  EXPECT_NE(wait_msg.find(where), std::string::npos) << wait_msg;

  // The connection is still usable after a timeout.
  s->set_timeout(seconds(5));
  EXPECT_EQ(s->get("present"), "1");
}

TEST(ParallelStore, TcpBarrier) {
  StoreServer server("127.0.0.1", 0, kToken);
  std::vector<std::thread> threads;
  std::atomic<int> passed{0};
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      auto s = connect_store("127.0.0.1", server.port(), kToken, r, seconds(10));
      store_barrier(*s, "start", r, 3);
      store_barrier(*s, "end", r, 3);
      ++passed;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(passed.load(), 3);

  auto s = connect_store("127.0.0.1", server.port(), kToken, 0, milliseconds(200));
  const std::string msg = error_of([&] { store_barrier(*s, "lonely", 0, 3); });
  EXPECT_NE(msg.find("ranks 1, 2"), std::string::npos) << msg;
}

TEST(ParallelStore, WrongTokenIsRefusedAndServerKeepsServing) {
  StoreServer server("127.0.0.1", 0, kToken);
  auto good = connect_store("127.0.0.1", server.port(), kToken, 0, seconds(5));
  good->set("k", "v");
  testing::internal::CaptureStderr();
  const std::string msg =
      error_of([&] { connect_store("127.0.0.1", server.port(), "not-the-token", 2, seconds(5)); });
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(msg.find("bad token"), std::string::npos) << msg;
  EXPECT_NE(msg.find("STRATA_TOKEN"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 2"), std::string::npos) << msg;
  EXPECT_NE(log.find("store: refused connection from 127.0.0.1: bad token"), std::string::npos) << log;
  // An empty token is refused too.
  EXPECT_THROW(connect_store("127.0.0.1", server.port(), "", 2, seconds(5)), NetworkError);
  // The server keeps serving, and what it serves now is the job's failure:
  // a rank of this protocol with a wrong token is a rank of this job that
  // cannot join, so every other rank hears of it at once
  // (parallel_heartbeat_test.cpp has the rest).
  const std::string failed = error_of([&] { good->get("k"); });
  EXPECT_NE(failed.find("rank 2 on 127.0.0.1 presented a wrong STRATA_TOKEN"), std::string::npos) << failed;
  auto another = connect_store("127.0.0.1", server.port(), kToken, 1, seconds(5));
  EXPECT_THROW(another->get("k"), JobFailedError);
}

TEST(ParallelStore, GarbageDoesNotFailTheJob) {
  StoreServer server("127.0.0.1", 0, kToken);
  auto good = connect_store("127.0.0.1", server.port(), kToken, 0, seconds(5));
  good->set("k", "v");
  testing::internal::CaptureStderr();
  {
    Socket raw = connect_tcp("127.0.0.1", server.port(), deadline_after(seconds(5)));
    const std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    send_all(raw, junk.data(), junk.size(), deadline_after(seconds(5)), "junk");
  }
  std::this_thread::sleep_for(milliseconds(100));
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(good->get("k"), "v");
  EXPECT_FALSE(server.failure().has_value());
}

std::string hello(const std::string& token) {
  std::string h = "STRS";
  auto u32 = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) h.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  u32(1);
  u32(7);
  u32(static_cast<uint32_t>(token.size()));
  return h + token;
}

// Sends a raw request header claiming the given sizes; returns whether the
// server closed the connection (instead of waiting for the body).
bool server_drops(int port, uint32_t key_len, uint64_t value_len) {
  Socket raw = connect_tcp("127.0.0.1", port, deadline_after(seconds(5)));
  const std::string h = hello(kToken);
  send_all(raw, h.data(), h.size(), deadline_after(seconds(5)), "test hello");
  char reply[8];
  recv_all(raw, reply, 8, deadline_after(seconds(5)), "test hello");
  EXPECT_EQ(std::memcmp(reply, "STRS\0\0\0\0", 8), 0);
  std::string req;
  req.push_back(1);  // SET
  for (int i = 0; i < 4; ++i) req.push_back(static_cast<char>((key_len >> (8 * i)) & 0xff));
  if (key_len <= 4096) {
    req += std::string(key_len, 'k');
    for (int i = 0; i < 8; ++i) req.push_back(static_cast<char>((value_len >> (8 * i)) & 0xff));
  }
  send_all(raw, req.data(), req.size(), deadline_after(seconds(5)), "test request");
  char b;
  try {
    recv_all(raw, &b, 1, deadline_after(seconds(5)), "test response");
  } catch (const TimeoutError&) {
    return false;
  } catch (const NetworkError&) {
    return true;  // closed by the server
  }
  return false;
}

TEST(ParallelStore, OversizeMessagesAreDroppedWithoutCrashing) {
  StoreServer server("127.0.0.1", 0, kToken);
  auto good = connect_store("127.0.0.1", server.port(), kToken, 0, seconds(5));
  testing::internal::CaptureStderr();
  const bool key_dropped = server_drops(server.port(), 1u << 20, 0);
  const bool value_dropped = server_drops(server.port(), 3, 1ull << 30);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(key_dropped);
  EXPECT_TRUE(value_dropped);
  EXPECT_NE(log.find("key of 1048576 bytes exceeds the 4096-byte limit"), std::string::npos) << log;
  EXPECT_NE(log.find("value of 1073741824 bytes exceeds"), std::string::npos) << log;
  EXPECT_NE(log.find("(rank 7)"), std::string::npos) << log;
  // The client refuses to send oversize messages itself.
  EXPECT_THROW(good->set(std::string(5000, 'k'), "v"), Error);
  good->set("still", "alive");
  EXPECT_EQ(good->get("still"), "alive");
}

TEST(ParallelStore, NotAStoreClientIsRefused) {
  StoreServer server("127.0.0.1", 0, kToken);
  testing::internal::CaptureStderr();
  {
    Socket raw = connect_tcp("127.0.0.1", server.port(), deadline_after(seconds(5)));
    const std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    send_all(raw, junk.data(), junk.size(), deadline_after(seconds(5)), "junk");
    char b;
    EXPECT_THROW(recv_all(raw, &b, 1, deadline_after(seconds(5)), "junk"), NetworkError);
  }
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("not a strata store client"), std::string::npos) << log;
  auto good = connect_store("127.0.0.1", server.port(), kToken, 0, seconds(5));
  good->set("a", "b");
}

TEST(ParallelStore, ManyConcurrentClientsAddExactly) {
  StoreServer server("127.0.0.1", 0, kToken);
  constexpr int kClients = 16;
  constexpr int kAdds = 40;
  std::vector<std::vector<int64_t>> seen(kClients);
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      auto s = connect_store("127.0.0.1", server.port(), kToken, c, seconds(20));
      for (int i = 0; i < kAdds; ++i) seen[c].push_back(s->add("counter", 1));
      s->set("done/" + std::to_string(c), "1");
    });
  }
  for (auto& t : threads) t.join();
  std::vector<int64_t> all;
  for (auto& v : seen) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), static_cast<size_t>(kClients * kAdds));
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i], static_cast<int64_t>(i + 1));
  auto s = connect_store("127.0.0.1", server.port(), kToken, 0, seconds(5));
  EXPECT_EQ(s->get("counter"), std::to_string(kClients * kAdds));
}

TEST(ParallelStore, ClientRetriesUntilTheServerListens) {
  const int port = pick_free_port("127.0.0.1");
  auto client = std::async(std::launch::async, [&] {
    auto s = connect_store("127.0.0.1", port, kToken, 1, seconds(10));
    return s->get("ready");
  });
  std::this_thread::sleep_for(milliseconds(300));
  StoreServer server("127.0.0.1", port, kToken);
  auto s = connect_store("127.0.0.1", port, kToken, 0, seconds(5));
  s->set("ready", "yes");
  EXPECT_EQ(client.get(), "yes");
}

TEST(ParallelStore, ConnectTimeoutNamesTheAddress) {
  const int port = pick_free_port("127.0.0.1");
  const auto t0 = Clock::now();
  const std::string msg = error_of([&] { connect_store("127.0.0.1", port, kToken, 4, milliseconds(300)); });
  EXPECT_LT(seconds_since(t0), 3.0);
  EXPECT_NE(msg.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("refused"), std::string::npos) << msg;
}

TEST(ParallelStore, ServerGoingAwayEndsAWaitingGet) {
  auto server = std::make_unique<StoreServer>("127.0.0.1", 0, kToken);
  auto s = connect_store("127.0.0.1", server->port(), kToken, 1, seconds(30));
  const auto t0 = Clock::now();
  auto waiter = std::async(std::launch::async, [&] { return error_of([&] { s->get("never"); }); });
  std::this_thread::sleep_for(milliseconds(150));
  server.reset();
  const std::string msg = waiter.get();
  EXPECT_LT(seconds_since(t0), 10.0);
  EXPECT_NE(msg.find("'never'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 0"), std::string::npos) << msg;  // "rank 0, which serves the store, may have exited"
}

TEST(ParallelSocket, SendRecvTimeoutsAndPeerClose) {
  Socket listener = listen_tcp("127.0.0.1", 0);
  const int port = local_port(listener);
  Socket client = connect_tcp("127.0.0.1", port, deadline_after(seconds(5)));
  Socket server = accept_tcp(listener, deadline_after(seconds(5)));
  ASSERT_TRUE(server.valid());
  const char msg[] = "ping";
  send_all(client, msg, 4, deadline_after(seconds(5)), "test");
  char buf[8] = {0};
  recv_all(server, buf, 4, deadline_after(seconds(5)), "test");
  EXPECT_STREQ(buf, "ping");
  EXPECT_THROW(recv_all(server, buf, 1, deadline_after(milliseconds(50)), "test"), TimeoutError);
  client.close();
  const std::string err = error_of([&] { recv_all(server, buf, 1, deadline_after(seconds(5)), "ring chunk"); });
  EXPECT_NE(err.find("ring chunk from 127.0.0.1:"), std::string::npos) << err;
  EXPECT_NE(err.find("closed by the peer"), std::string::npos) << err;
  // Writing to a closed peer is an error, not SIGPIPE.
  std::vector<char> big(1 << 20, 'x');
  EXPECT_THROW(
      {
        for (int i = 0; i < 16; ++i) send_all(server, big.data(), big.size(), deadline_after(seconds(5)), "test");
      },
      NetworkError);
  EXPECT_FALSE(accept_tcp(listener, deadline_after(milliseconds(20))).valid());
}

}  // namespace
}  // namespace strata::parallel
