// `strata launch`: starts the local ranks of a multi-process run, tags their
// output with "[rank K] ", and stops them all when one fails.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "parallel/rendezvous/env.h"

namespace strata::parallel {

// Where the rank that writes a parameter-server run's snapshots (worker 0)
// publishes the path of the last one, for the launcher to name when that
// rank dies and the job ends.
inline constexpr const char* kLastSnapshotKey = "strata/last_snapshot";

struct LaunchOptions {
  int nproc = 1;      // processes on this node
  // Parameter-server processes started after the nproc ranks (single node):
  // ranks nproc .. nproc+servers-1, told by STRATA_PS_SERVERS. A worker
  // other than worker 0 killed by a signal, or silent (the store's
  // lost_ranks: killed here), then does not stop the others (the servers go
  // on without it), and one still running 10 s after every server ended is
  // killed; worker 0 (which writes the snapshots, named when it dies), a
  // worker that exits with an error, or any server that ends, still stops
  // the job.
  int servers = 0;
  int nnodes = 1;
  int node_rank = 0;  // this node's index, 0 .. nnodes-1
  // host:port where rank 0 serves the store (every node must reach it).
  // Empty (single node only): the launcher serves the store itself, on
  // 127.0.0.1 and a port the system picks when it binds (port 0), and hands
  // that address to the ranks; so concurrent launches never race for a port.
  std::string master;
  // Who serves the store: set by launch() (kLauncher when master was empty).
  StoreHost store_host = StoreHost::kRankZero;
  // Shared secret for the store. Empty: STRATA_TOKEN from the environment,
  // else a random one (single node only; every node must share it).
  std::string token;
  int timeout_s = 300;  // STRATA_TIMEOUT_S for the ranks
  // After the first failure: SIGTERM to the other ranks, SIGKILL this much later.
  std::chrono::milliseconds kill_grace{std::chrono::seconds(5)};
  // Heartbeats (parallel/rendezvous/heartbeat.h): STRATA_HEARTBEAT_S and
  // STRATA_HEARTBEAT_TIMEOUT_S for the ranks. Negative: not set here, so the
  // ranks take them from the launcher's environment, or their defaults.
  double heartbeat_s = -1;
  double heartbeat_timeout_s = -1;
  std::vector<std::string> command;  // program and arguments (searched in PATH)
  // A command whose program is spelled exactly this runs the launcher's own
  // executable (/proc/self/exe) instead of the first of that name in PATH
  // (`strata launch` sets "strata"): the ranks then run the very build that
  // serves their store and sets their environment, also when it is not on
  // PATH or an older strata is. A path (./build/strata) is taken as given.
  std::string own_command;
};

// Checks the options and fills in the token. Throws ConfigError saying what
// to fix.
LaunchOptions resolve_launch_options(LaunchOptions options);

// The STRATA_* variables for one local rank of resolved options with the
// store's address in `master`, as "NAME=value" strings.
std::vector<std::string> rank_environment(const LaunchOptions& resolved, int local_rank);

// 128 random bits from /dev/urandom as 32 hex digits.
std::string random_token();

// Serves the store when no master was given, runs the ranks and waits for them. Returns the exit status for the
// launcher: 0 when every rank exits 0; else the first failing rank's status
// (128+N for signal N); 130 after Ctrl-C (SIGINT is forwarded to the ranks,
// which write a snapshot and stop) unless a rank reported a failure.
// When it serves the store, the failure the store recorded names the cause
// (a rank that reported an error is named even when another exits first),
// and a rank whose heartbeats stopped is killed at once (SIGKILL: a stopped
// process does not act on SIGTERM).
// The ranks' stdin is /dev/null: each runs in its own process group, so that
// the terminal's Ctrl-C reaches them once, through the launcher.
int launch(const LaunchOptions& options);

}  // namespace strata::parallel
