#include "parallel/parameter_server/ps_log.h"

#include <algorithm>
#include <cstdio>

#include "parallel/rendezvous/launcher.h"

namespace strata::parallel {

ParameterServerConsole::ParameterServerConsole(std::ostream& out, ParameterServerWorker& ps)
    : out_(out), ps_(ps), inner_(out), last_(std::chrono::steady_clock::now()) {}

void ParameterServerConsole::on_start(const StartInfo& info) {
  inner_.on_start(info);
  last_ = std::chrono::steady_clock::now();
  ps_.take_comm_wait_seconds();
}

void ParameterServerConsole::on_iteration(const IterationInfo& info) {
  const auto now = std::chrono::steady_clock::now();
  const double interval = std::chrono::duration<double>(now - last_).count();
  const double wait = ps_.take_comm_wait_seconds();
  last_ = now;
  const int workers = ps_.workers();
  char buf[96];
  out_ << "iter " << info.iter << "/" << info.max_iter << "  loss " << format_number(info.loss) << "  lr "
       << format_number(info.lr);
  // A step is one batch of every worker (ASYNC: N pushes make a step).
  if (info.samples_per_second > 0) {
    std::snprintf(buf, sizeof buf, "  %.0f samples/s total (%d worker%s)", info.samples_per_second * workers, workers,
                  workers == 1 ? "" : "s");
    out_ << buf;
  }
  if (interval > 0) {
    std::snprintf(buf, sizeof buf, "  server wait %.0f%%", 100.0 * std::min(1.0, wait / interval));
    out_ << buf;
  }
  out_ << "  ETA " << strata::format_duration(info.eta_seconds);
  for (const auto& kv : info.outputs) {
    if (kv.first == "loss") continue;
    out_ << "  " << kv.first << " " << format_number(kv.second);
  }
  out_ << std::endl;
}

void SnapshotAnnouncer::on_snapshot(const SnapshotInfo& info) {
  try {
    store_.set(kLastSnapshotKey, info.state_path);
  } catch (const std::exception&) {
    // The store is gone: the heartbeat reports that; the snapshot itself is written.
  }
}

}  // namespace strata::parallel
