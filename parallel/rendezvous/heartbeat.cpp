#include "parallel/rendezvous/heartbeat.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "parallel/socket/socket.h"

namespace strata::parallel {

namespace {

std::string seconds_text(Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

}  // namespace

JobFailedHandler exit_on_job_failure(std::string program) {
  return [program = std::move(program)](const std::string& message) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", program.c_str(), message.c_str());
    std::fflush(stderr);
    std::_Exit(1);
  };
}

Heartbeat::Heartbeat(std::unique_ptr<Store> store, std::string who, std::string store_desc,
                     std::chrono::milliseconds interval, std::chrono::milliseconds limit, JobFailedHandler on_failure,
                     IfLost if_lost)
    : store_(std::move(store)),
      who_(std::move(who)),
      store_desc_(std::move(store_desc)),
      interval_(interval),
      limit_(limit),
      on_failure_(std::move(on_failure)),
      beat_(if_lost == IfLost::kDropRank ? HeartbeatPhase::kBeatDroppable : HeartbeatPhase::kBeat) {
  store_->set_timeout(limit_);
  store_->heartbeat(beat_, limit_);
  thread_ = std::thread([this] { run(); });
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (this_rank_failed_.load() || job_failed_.load()) return;
  try {
    store_->heartbeat(HeartbeatPhase::kGoodbye, limit_);
  } catch (const std::exception&) {
    // The store is gone or the job failed meanwhile: nothing left to say.
  }
}

void Heartbeat::run() {
  Deadline last_answer = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (cv_.wait_for(lock, interval_, [this] { return stop_; })) return;
    lock.unlock();
    std::string failure;
    try {
      store_->heartbeat(beat_, limit_);
      last_answer = Clock::now();
    } catch (const JobFailedError& e) {
      failure = e.what();
    } catch (const std::exception& e) {
      // The store may come back (the client reconnects at the next beat);
      // silent for longer than the limit, it is stopped, hung or gone.
      const Clock::duration silent = Clock::now() - last_answer;
      if (silent > limit_) {
        failure = who_ + ": " + store_desc_ + " has not answered a heartbeat for " + seconds_text(silent) +
                  " (the limit, STRATA_HEARTBEAT_TIMEOUT_S, is " + seconds_text(limit_) +
                  "): it is stopped, hung or has exited (" + e.what() + ")";
      }
    }
    if (!failure.empty()) {
      job_failed_.store(true);
      // This rank's own error is already on its way out through the training thread.
      if (!this_rank_failed_.load()) on_failure_(failure);
      return;
    }
    lock.lock();
  }
}

std::string Heartbeat::report_failure(const std::string& what, FailureOrigin origin) {
  this_rank_failed_.store(true);
  try {
    if (origin == FailureOrigin::kCommunication) {
      // Ask a few times within one interval whether the store already knows
      // of the failure this error is the echo of.
      const Deadline until = deadline_after(interval_);
      for (;;) {
        try {
          store_->heartbeat(beat_, limit_);
        } catch (const JobFailedError& e) {
          return e.what();
        }
        if (Clock::now() >= until) break;
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, interval_ / 5, [this] { return stop_; });
      }
    }
    store_->report_failure(what);
  } catch (const std::exception&) {
    // The store is unreachable: the other ranks find out from its silence.
  }
  return "";
}

std::unique_ptr<Heartbeat> start_heartbeat(const RankEnv& env, const std::string& program, IfLost if_lost,
                                           const std::function<std::string(const std::string&)>& name_ranks) {
  if (!env.distributed() || env.heartbeat_timeout.count() == 0) return nullptr;
  if (env.master_host.empty() || env.master_port <= 0 || env.token.empty()) return nullptr;
  const std::string address = env.master_host + ":" + std::to_string(env.master_port);
  const std::string store_desc = env.store_host == StoreHost::kLauncher
                                     ? "strata launch, which serves the store at " + address + ","
                                     : "rank 0, which serves the store at " + address + ",";
  std::unique_ptr<Store> store =
      connect_store(env.master_host, env.master_port, env.token, env.rank, env.heartbeat_timeout);
  JobFailedHandler on_failure = exit_on_job_failure(program);
  if (name_ranks) {
    on_failure = [exit = std::move(on_failure), name_ranks](const std::string& message) { exit(name_ranks(message)); };
  }
  return std::make_unique<Heartbeat>(std::move(store), env.describe(), store_desc, env.heartbeat_interval,
                                     env.heartbeat_timeout, std::move(on_failure), if_lost);
}

}  // namespace strata::parallel
