// Job failure through the rendezvous store, with threads as ranks: a rank
// that goes silent, reports an error, disappears without a goodbye, or
// presents a wrong token fails every rank at once, naming it, long before
// the store's own timeout; a rank that ends normally does not, nor does one
// the job can lose (it is recorded as lost).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "parallel/rendezvous/heartbeat.h"
#include "parallel/rendezvous/store.h"
#include "parallel/socket/socket.h"

namespace strata::parallel {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

const std::string kToken = "heartbeat-test-token";
// Far longer than any wait below: a test that passes did not wait for it.
constexpr auto kStoreTimeout = seconds(60);
constexpr auto kInterval = milliseconds(50);
constexpr auto kLimit = milliseconds(400);

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::unique_ptr<Store> client(const StoreServer& server, int rank, std::chrono::milliseconds timeout = kStoreTimeout) {
  return connect_store("127.0.0.1", server.port(), kToken, rank, timeout);
}

// What a rank's heartbeat thread would report, instead of ending the process.
struct Reported {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<std::string> message;

  JobFailedHandler handler() {
    return [this](const std::string& m) {
      std::lock_guard<std::mutex> lock(mu);
      message = m;
      cv.notify_all();
    };
  }
  // The message, or "" when none came within `within`.
  std::string wait(std::chrono::milliseconds within) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, within, [&] { return message.has_value(); });
    return message.value_or("");
  }
};

std::unique_ptr<Heartbeat> heartbeat(const StoreServer& server, int rank, Reported& reported) {
  return std::make_unique<Heartbeat>(client(server, rank, kLimit), "rank " + std::to_string(rank) + " of 3",
                                     "rank 0, which serves the store,", kInterval, kLimit, reported.handler());
}

// A GET that never succeeds, on its own thread: how long until it fails, and how.
std::future<std::pair<double, std::string>> blocked_get(Store& store) {
  return std::async(std::launch::async, [&store] {
    const auto t0 = Clock::now();
    try {
      store.get("never-set");
    } catch (const JobFailedError& e) {
      return std::make_pair(seconds_since(t0), std::string(e.what()));
    } catch (const std::exception& e) {
      return std::make_pair(seconds_since(t0), std::string("not a JobFailedError: ") + e.what());
    }
    return std::make_pair(seconds_since(t0), std::string("(no error)"));
  });
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(ParallelHeartbeat, SilentRankIsNamedWithinTheLimit) {
  StoreServer server("127.0.0.1", 0, kToken);
  Reported r0;
  auto hb0 = heartbeat(server, 0, r0);
  // Rank 1 beats once and then never again, as a process stopped by SIGSTOP.
  auto silent = client(server, 1, kLimit);
  silent->heartbeat(HeartbeatPhase::kBeat, kLimit);
  auto waiting = client(server, 2);
  auto get = blocked_get(*waiting);
  const auto t0 = Clock::now();
  const std::string msg = r0.wait(seconds(10));
  const double took = seconds_since(t0);
  EXPECT_TRUE(contains(msg, "rank 1 on ")) << msg;
  EXPECT_TRUE(contains(msg, "sent no heartbeat")) << msg;
  EXPECT_TRUE(contains(msg, "stopped")) << msg;
  EXPECT_LT(took, 3.0) << msg;
  const auto [get_took, get_msg] = get.get();
  EXPECT_LT(get_took, 3.0);
  EXPECT_TRUE(contains(get_msg, "rank 1 on ")) << get_msg;
  const std::optional<JobFailure> f = server.failure();
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->rank, 1);
  EXPECT_EQ(f->kind, JobFailureKind::kSilent);
}

TEST(ParallelHeartbeat, ABusyTrainingThreadIsNotAHang) {
  StoreServer server("127.0.0.1", 0, kToken);
  Reported r0, r1;
  auto hb0 = heartbeat(server, 0, r0);
  auto hb1 = heartbeat(server, 1, r1);
  // The "training thread" is busy for five limits; the heartbeat thread is not.
  std::this_thread::sleep_for(5 * kLimit);
  EXPECT_EQ(r0.wait(milliseconds(1)), "");
  EXPECT_EQ(r1.wait(milliseconds(1)), "");
  EXPECT_FALSE(server.failure().has_value());
}

TEST(ParallelHeartbeat, ReportedErrorStopsEveryRankAtOnce) {
  StoreServer server("127.0.0.1", 0, kToken);
  Reported r0, r2;
  auto hb0 = heartbeat(server, 0, r0);
  auto hb2 = heartbeat(server, 2, r2);
  auto waiting = client(server, 0);
  auto get = blocked_get(*waiting);
  std::this_thread::sleep_for(kInterval);
  {
    Reported r1;
    auto hb1 = heartbeat(server, 1, r1);
    hb1->report_failure("iteration 2: the loss is nan", FailureOrigin::kThisRank);
    // Its own heartbeat does not report its own failure back to it.
    EXPECT_EQ(r1.wait(4 * kInterval), "");
  }
  for (Reported* r : {&r0, &r2}) {
    const std::string msg = r->wait(seconds(2));
    EXPECT_TRUE(contains(msg, "rank 1 on ")) << msg;
    EXPECT_TRUE(contains(msg, "failed: iteration 2: the loss is nan")) << msg;
  }
  const auto [get_took, get_msg] = get.get();
  EXPECT_LT(get_took, 2.0);
  EXPECT_TRUE(contains(get_msg, "the job failed: rank 1 on ")) << get_msg;
  // Every later request fails the same way.
  auto later = client(server, 2);
  try {
    later->set("k", "v");
    ADD_FAILURE() << "a request after the failure succeeded";
  } catch (const JobFailedError& e) {
    EXPECT_TRUE(contains(e.what(), "the loss is nan")) << e.what();
  }
  EXPECT_EQ(server.failure()->kind, JobFailureKind::kReported);
}

TEST(ParallelHeartbeat, CommunicationErrorDefersToTheFailureAlreadyRecorded) {
  StoreServer server("127.0.0.1", 0, kToken);
  Reported r0, r1;
  auto hb0 = heartbeat(server, 0, r0);
  auto hb1 = heartbeat(server, 1, r1);
  client(server, 1)->report_failure("the real cause");
  // Rank 0's transfer with rank 1 failed as a consequence: not a new cause.
  const std::string cause = hb0->report_failure("rank 1 closed the connection", FailureOrigin::kCommunication);
  EXPECT_TRUE(contains(cause, "rank 1 on ")) << cause;
  EXPECT_TRUE(contains(cause, "failed: the real cause")) << cause;
  const std::optional<JobFailure> f = server.failure();
  ASSERT_TRUE(f.has_value());
  EXPECT_TRUE(contains(f->message, "the real cause")) << f->message;
}

TEST(ParallelHeartbeat, CommunicationErrorWithNoKnownCauseIsReported) {
  StoreServer server("127.0.0.1", 0, kToken);
  Reported r0, r1;
  auto hb0 = heartbeat(server, 0, r0);
  auto hb1 = heartbeat(server, 1, r1);
  const auto t0 = Clock::now();
  EXPECT_EQ(hb0->report_failure("recv from rank 1 timed out", FailureOrigin::kCommunication), "");
  EXPECT_GE(seconds_since(t0), 0.8 * std::chrono::duration<double>(kInterval).count());
  const std::string msg = r1.wait(seconds(2));
  EXPECT_TRUE(contains(msg, "rank 0 on ")) << msg;
  EXPECT_TRUE(contains(msg, "failed: recv from rank 1 timed out")) << msg;
}

TEST(ParallelHeartbeat, ConnectionClosedWithoutGoodbyeFailsTheJob) {
  StoreServer server("127.0.0.1", 0, kToken);
  Reported r0;
  auto hb0 = heartbeat(server, 0, r0);
  {
    auto killed = client(server, 1, kLimit);
    killed->heartbeat(HeartbeatPhase::kBeat, seconds(60));  // a long limit: the close alone must tell
  }
  const std::string msg = r0.wait(seconds(2));
  EXPECT_TRUE(contains(msg, "rank 1 on ")) << msg;
  EXPECT_TRUE(contains(msg, "exited or was killed")) << msg;
  EXPECT_EQ(server.failure()->kind, JobFailureKind::kConnectionLost);
}

// A parameter-server worker other than worker 0 beats as a rank the job can
// lose: its silence or its exit is recorded as a lost rank, nobody's job
// fails, and a beat it sends after it was given up is refused.
TEST(ParallelHeartbeat, ADroppableRankIsLostNotAFailure) {
  StoreServer server("127.0.0.1", 0, kToken);
  Reported r0;
  auto hb0 = heartbeat(server, 0, r0);
  auto silent = client(server, 1, kLimit);
  silent->heartbeat(HeartbeatPhase::kBeatDroppable, kLimit);
  {
    auto killed = client(server, 2, kLimit);
    killed->heartbeat(HeartbeatPhase::kBeatDroppable, seconds(60));
  }
  const auto t0 = Clock::now();
  while (server.lost_ranks().size() < 2 && seconds_since(t0) < 5.0) std::this_thread::sleep_for(kInterval);
  const std::vector<JobFailure> lost = server.lost_ranks();
  ASSERT_EQ(lost.size(), 2u);
  EXPECT_LT(seconds_since(t0), 3.0);
  const JobFailure& closed = lost[0].rank == 2 ? lost[0] : lost[1];
  const JobFailure& stopped = lost[0].rank == 1 ? lost[0] : lost[1];
  EXPECT_EQ(closed.kind, JobFailureKind::kConnectionLost);
  EXPECT_TRUE(contains(closed.message, "rank 2 on ")) << closed.message;
  EXPECT_EQ(stopped.kind, JobFailureKind::kSilent);
  EXPECT_TRUE(contains(stopped.message, "rank 1 on ")) << stopped.message;
  EXPECT_TRUE(contains(stopped.message, "sent no heartbeat")) << stopped.message;
  // Rank 0 goes on; the job has not failed.
  EXPECT_EQ(r0.wait(2 * kLimit), "");
  EXPECT_FALSE(server.failure().has_value());
  // Rank 1 comes back (SIGCONT): it was given up and must not rejoin.
  try {
    silent->heartbeat(HeartbeatPhase::kBeatDroppable, kLimit);
    ADD_FAILURE() << "a rank the job gave up was taken back";
  } catch (const JobFailedError& e) {
    EXPECT_TRUE(contains(e.what(), "rank 1 was dropped")) << e.what();
  }
  EXPECT_FALSE(server.failure().has_value());
}

TEST(ParallelHeartbeat, PeekReadsAValueWithoutWaiting) {
  StoreServer server("127.0.0.1", 0, kToken);
  EXPECT_FALSE(server.peek("strata/last_snapshot").has_value());
  auto c = client(server, 0);
  c->set("strata/last_snapshot", "run/digits_iter_20.solverstate.safetensors");
  EXPECT_EQ(server.peek("strata/last_snapshot").value_or(""), "run/digits_iter_20.solverstate.safetensors");
}

TEST(ParallelHeartbeat, RanksEndingNormallyFailNothing) {
  Reported r0, r1;
  const auto t0 = Clock::now();
  {
    StoreServer server("127.0.0.1", 0, kToken);
    auto hb0 = heartbeat(server, 0, r0);
    auto hb1 = heartbeat(server, 1, r1);
    std::this_thread::sleep_for(3 * kInterval);
    hb0.reset();
    hb1.reset();
    std::this_thread::sleep_for(2 * kLimit);
    EXPECT_FALSE(server.failure().has_value());
  }
  // The server did not wait for heartbeats that had said goodbye.
  EXPECT_LT(seconds_since(t0), 3.0);
  EXPECT_EQ(r0.wait(milliseconds(1)), "");
  EXPECT_EQ(r1.wait(milliseconds(1)), "");
}

TEST(ParallelHeartbeat, WrongTokenFailsEveryRankAtOnce) {
  StoreServer server("127.0.0.1", 0, kToken);
  Reported r0;
  auto hb0 = heartbeat(server, 0, r0);
  auto waiting = client(server, 0);
  auto get = blocked_get(*waiting);
  testing::internal::CaptureStderr();
  EXPECT_THROW(connect_store("127.0.0.1", server.port(), "another-token", 3, seconds(5)), NetworkError);
  testing::internal::GetCapturedStderr();
  const auto [get_took, get_msg] = get.get();
  EXPECT_LT(get_took, 2.0);
  EXPECT_TRUE(contains(get_msg, "rank 3 on 127.0.0.1 presented a wrong STRATA_TOKEN")) << get_msg;
  const std::string msg = r0.wait(seconds(2));
  EXPECT_TRUE(contains(msg, "wrong STRATA_TOKEN")) << msg;
  EXPECT_EQ(server.failure()->kind, JobFailureKind::kWrongToken);
  EXPECT_EQ(server.failure()->rank, 3);
}

TEST(ParallelHeartbeat, SilentStoreIsNamed) {
  Reported r0;
  std::unique_ptr<Heartbeat> hb0;
  {
    StoreServer server("127.0.0.1", 0, kToken);
    hb0 = heartbeat(server, 0, r0);
  }  // rank 0's process, which served the store, is gone
  const std::string msg = r0.wait(seconds(10));
  EXPECT_TRUE(contains(msg, "rank 0, which serves the store, has not answered a heartbeat")) << msg;
}

TEST(ParallelHeartbeat, InProcessStoreWakesItsWaitersOnAFailure) {
  auto store = make_memory_store(kStoreTimeout);
  auto get = blocked_get(*store);
  std::this_thread::sleep_for(kInterval);
  store->report_failure("rank 1 failed: boom");
  const auto [took, msg] = get.get();
  EXPECT_LT(took, 2.0);
  EXPECT_TRUE(contains(msg, "rank 1 failed: boom")) << msg;
  EXPECT_THROW(store->heartbeat(HeartbeatPhase::kBeat, kLimit), JobFailedError);
  EXPECT_THROW(store->set("k", "v"), JobFailedError);
}

TEST(ParallelHeartbeat, EnvironmentSettingsAreChecked) {
  const auto with = [](const char* interval, const char* limit) {
    setenv("STRATA_HEARTBEAT_S", interval, 1);
    setenv("STRATA_HEARTBEAT_TIMEOUT_S", limit, 1);
    std::string err;
    try {
      const RankEnv e = detect_rank_env();
      err = "ok " + std::to_string(e.heartbeat_interval.count()) + " " + std::to_string(e.heartbeat_timeout.count());
    } catch (const ConfigError& e) {
      err = e.what();
    }
    unsetenv("STRATA_HEARTBEAT_S");
    unsetenv("STRATA_HEARTBEAT_TIMEOUT_S");
    return err;
  };
  EXPECT_EQ(with("0.5", "3"), "ok 500 3000");
  EXPECT_EQ(with("1", "0"), "ok 1000 0");
  EXPECT_TRUE(contains(with("2", "3"), "at least twice STRATA_HEARTBEAT_S")) << with("2", "3");
  EXPECT_TRUE(contains(with("x", "3"), "STRATA_HEARTBEAT_S='x' is not a number of seconds")) << with("x", "3");
  const RankEnv defaults = detect_rank_env();
  EXPECT_EQ(defaults.heartbeat_interval, milliseconds(1000));
  EXPECT_EQ(defaults.heartbeat_timeout, milliseconds(5000));
}

}  // namespace
}  // namespace strata::parallel
