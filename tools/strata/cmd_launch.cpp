// strata launch: start the ranks of a multi-process run on this node.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "framework/error.h"
#include "parallel/data_parallel/data_parallel_config.h"
#include "parallel/rendezvous/launcher.h"
#include "tools/strata/args.h"
#include "tools/strata/commands.h"

namespace strata::cli {

namespace {

// A number of seconds (decimals allowed) from a flag.
double seconds_flag(const Args& args, const std::string& name) {
  const std::string v = args.get(name);
  char* end = nullptr;
  const double s = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(s >= 0) || s > 86400.0 * 365) {
    fail<ConfigError>("--", name, " '", v, "' is not a number of seconds (e.g. 5 or 0.5)");
  }
  return s;
}

const char* kLaunchUsage =
    "\nusage: strata launch --nproc N [--nnodes M --node-rank R --master HOST:PORT] [--timeout S] "
    "-- COMMAND ARGS...\n\n"
    "Starts N processes running COMMAND on this node; their output lines are prefixed \"[rank K] \".\n"
    "Each gets STRATA_RANK, STRATA_WORLD_SIZE, STRATA_LOCAL_RANK, STRATA_LOCAL_WORLD_SIZE,\n"
    "STRATA_MASTER (the store's address: the launcher serves it, or rank 0 with --master),\n"
    "STRATA_STORE_HOST, STRATA_TOKEN and STRATA_TIMEOUT_S (and STRATA_DP_TRANSPORT with --dp-transport).\n"
    "When a rank fails, the others are stopped (SIGTERM, then SIGKILL after 5 s) and the launcher\n"
    "exits with that rank's status. Ctrl-C is forwarded to the ranks, which snapshot and stop.\n"
    "Ranks of strata train send heartbeats: one silent for --heartbeat-timeout seconds (stopped or\n"
    "hung) fails the job at once, naming it; a parameter-server worker other than worker 0 is killed and\n"
    "dropped instead, and one still running 10 s after every server ended is killed, named.\n"
    "A COMMAND spelled `strata` runs this strata binary.\n"
    "With --nnodes > 1, run the same command on every node with its --node-rank, the same\n"
    "--master, and the same STRATA_TOKEN exported.\n\n"
    "example: strata launch --nproc 4 -- strata train --solver models/digits/solver.prototxt\n";

// The ranks' timeout without --timeout: the launcher's own STRATA_TIMEOUT_S
// (as every rank would read it), else 300 s.
int timeout_from_environment() {
  const char* v = std::getenv("STRATA_TIMEOUT_S");
  if (!v || !*v) return 300;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 1 || n > (1 << 20)) {
    fail<ConfigError>("strata launch: STRATA_TIMEOUT_S='", v,
                      "' is not a whole number of seconds of at least 1; fix it, or pass --timeout S");
  }
  return static_cast<int>(n);
}

}  // namespace

int launch_main(int argc, char** argv) {
  Args args("launch",
            {{"nproc", FlagKind::kValue, "processes (ranks) to start on this node", ""},
             {"servers", FlagKind::kValue,
              "parameter-server processes started besides the --nproc workers (strata train --ps-mode ...)", "0"},
             {"nnodes", FlagKind::kValue, "number of nodes", "1"},
             {"node-rank", FlagKind::kValue, "this node's index, 0 .. nnodes-1", "0"},
             {"master", FlagKind::kValue, "HOST:PORT of node 0's store (required with --nnodes > 1)",
              "127.0.0.1 and a free port"},
             {"timeout", FlagKind::kValue, "seconds any rank waits for the others (STRATA_TIMEOUT_S)",
              "STRATA_TIMEOUT_S, else 300"},
             {"heartbeat", FlagKind::kValue, "seconds between a rank's heartbeats (STRATA_HEARTBEAT_S)",
              "STRATA_HEARTBEAT_S, else 1"},
             {"heartbeat-timeout", FlagKind::kValue,
              "seconds without a heartbeat after which a rank is named as stopped or hung and the job fails; "
              "0 = off, e.g. to debug a rank (STRATA_HEARTBEAT_TIMEOUT_S)",
              "STRATA_HEARTBEAT_TIMEOUT_S, else 5"},
             {"dp-transport", FlagKind::kValue,
              "data parallel transport of the ranks' strata train (auto, tcp, shm, rdma; STRATA_DP_TRANSPORT)",
              "their --dp-transport, else the solver's, else auto"}});
  // Flags end at "--"; everything after it is the command, untouched.
  int dash = argc;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) {
      dash = i;
      break;
    }
  }
  args.parse(dash, argv, 2);
  if (args.has("help")) {
    std::printf("%s%s", args.help().c_str(), kLaunchUsage);
    return 0;
  }
  parallel::LaunchOptions options;
  options.nproc = args.get_int("nproc", 0);
  if (!args.has("nproc")) args.require("nproc");
  options.servers = args.get_int("servers", 0);
  options.nnodes = args.get_int("nnodes", 1);
  options.node_rank = args.get_int("node-rank", 0);
  options.master = args.get("master", "");
  options.timeout_s = args.has("timeout") ? args.get_int("timeout", 300) : timeout_from_environment();
  if (args.has("heartbeat")) options.heartbeat_s = seconds_flag(args, "heartbeat");
  if (args.has("heartbeat-timeout")) options.heartbeat_timeout_s = seconds_flag(args, "heartbeat-timeout");
  if (args.has("dp-transport")) {
    const std::string transport = args.get("dp-transport");
    parallel::parse_dp_transport(transport, "--dp-transport");  // a bad name fails here, before any rank starts
    // The ranks inherit the launcher's environment.
    ::setenv("STRATA_DP_TRANSPORT", transport.c_str(), 1);
  }
  options.own_command = "strata";
  for (int i = dash + 1; i < argc; ++i) options.command.push_back(argv[i]);
  if (dash == argc) {
    fail<ConfigError>("strata launch: no command given; put it after --, e.g. strata launch --nproc 2 -- "
                      "strata train --solver S");
  }
  // Make sure our own messages are out before the ranks' output interleaves with them.
  std::fflush(stdout);
  std::fflush(stderr);
  return parallel::launch(options);
}

}  // namespace strata::cli
