// What worker 0 shows of a parameter-server run: progress lines with the
// throughput of all workers and the share of time spent waiting on the
// servers, and a "ps" line in the JSON-lines log with each progress line and
// at the end: every shard's pushes, bytes, staleness histogram (how many
// updates other workers applied between a worker's pull and its push) and
// the workers it lost:
//   {"event":"ps","iter":100,"shards":[{"shard":0,"pushes":300,...,"staleness":[280,20,0,...],"lost":[]}]}
#pragma once

#include <chrono>
#include <ostream>

#include "framework/solver/training_log.h"
#include "parallel/parameter_server/ps_worker.h"

namespace strata::parallel {

//   iter 100/600  loss 0.42  lr 0.048  7421 samples/s total (3 workers)  server wait 12%  ETA 0:01
class ParameterServerConsole final : public TrainingObserver {
 public:
  ParameterServerConsole(std::ostream& out, ParameterServerWorker& ps);
  void on_start(const StartInfo& info) override;
  void on_iteration(const IterationInfo& info) override;
  void on_test(const TestInfo& info) override { inner_.on_test(info); }
  void on_snapshot(const SnapshotInfo& info) override { inner_.on_snapshot(info); }
  void on_finish(const FinishInfo& info) override { inner_.on_finish(info); }

 private:
  std::ostream& out_;
  ParameterServerWorker& ps_;
  ConsolePrinter inner_;
  std::chrono::steady_clock::time_point last_;
};

class ParameterServerLog final : public TrainingObserver {
 public:
  ParameterServerLog(ParameterServerWorker& ps, JsonLinesLog& log) : ps_(ps), log_(log) {}
  void on_iteration(const IterationInfo&) override { log_.write_event("ps", ps_.stats_fields()); }
  void on_finish(const FinishInfo&) override { log_.write_event("ps", ps_.stats_fields()); }

 private:
  ParameterServerWorker& ps_;
  JsonLinesLog& log_;
};

// Worker 0 tells the store where each snapshot went: the job cannot go on
// without worker 0, and when it dies strata launch names the snapshot to
// resume from (rendezvous/launcher.h, kLastSnapshotKey).
class SnapshotAnnouncer final : public TrainingObserver {
 public:
  explicit SnapshotAnnouncer(Store& store) : store_(store) {}
  void on_snapshot(const SnapshotInfo& info) override;

 private:
  Store& store_;
};

}  // namespace strata::parallel
