// A shard's server at work for a whole run: a thread that reads worker 0's
// parameter table from the store, and then a thread per worker that
// connects that worker's pair transport and serves it (ps_server.h). In a
// server process it is all the process does; with COLOCATED placement every
// worker process runs one beside its training.
#pragma once

#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "framework/solver/solver_config.h"
#include "parallel/parameter_server/key_layout.h"
#include "parallel/parameter_server/ps_config.h"
#include "parallel/parameter_server/ps_server.h"
#include "parallel/rendezvous/env.h"

namespace strata::parallel {

class ShardService {
 public:
  // Starts at once; returns without waiting for any worker.
  ShardService(const SolverConfig& config, const ParameterServerConfig& ps, const PsRoles& roles, int shard,
               const RankEnv& env);
  // Joins the threads (wait() first for a clean end).
  ~ShardService();
  ShardService(const ShardService&) = delete;
  ShardService& operator=(const ShardService&) = delete;

  // Until every worker said goodbye or was lost. Rethrows an error of the
  // start (no parameter table within the timeout, a store that failed).
  void wait();
  // "server 0 (rank 3 on host-a)".
  const std::string& who() const { return who_; }
  // The server's end-of-run line ("" before it started).
  std::string summary() const;
  // Workers lost so far, and how many there were.
  int lost_workers() const;
  int workers() const { return roles_.workers; }

 private:
  void run();

  SolverConfig config_;
  ParameterServerConfig ps_;
  PsRoles roles_;
  int shard_;
  RankEnv env_;
  std::string who_;
  std::unique_ptr<KeyLayout> layout_;
  std::unique_ptr<ShardServer> server_;
  mutable std::mutex mu_;
  std::exception_ptr error_;
  std::thread main_;
};

}  // namespace strata::parallel
