// strata launch: start the ranks of a multi-process run on this node.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "framework/error.h"
#include "parallel/rendezvous/launcher.h"
#include "tools/strata/args.h"
#include "tools/strata/commands.h"

namespace strata::cli {

namespace {

const char* kLaunchUsage =
    "\nusage: strata launch --nproc N [--nnodes M --node-rank R --master HOST:PORT] [--timeout S] "
    "-- COMMAND ARGS...\n\n"
    "Starts N processes running COMMAND on this node; their output lines are prefixed \"[rank K] \".\n"
    "Each gets STRATA_RANK, STRATA_WORLD_SIZE, STRATA_LOCAL_RANK, STRATA_LOCAL_WORLD_SIZE,\n"
    "STRATA_MASTER (the store's address: the launcher serves it, or rank 0 with --master),\n"
    "STRATA_STORE_HOST, STRATA_TOKEN and STRATA_TIMEOUT_S.\n"
    "When a rank fails, the others are stopped (SIGTERM, then SIGKILL after 5 s) and the launcher\n"
    "exits with that rank's status. Ctrl-C is forwarded to the ranks, which snapshot and stop.\n"
    "With --nnodes > 1, run the same command on every node with its --node-rank, the same\n"
    "--master, and the same STRATA_TOKEN exported.\n\n"
    "example: strata launch --nproc 4 -- strata train --solver models/digits/solver.prototxt\n";

}  // namespace

int launch_main(int argc, char** argv) {
  Args args("launch",
            {{"nproc", FlagKind::kValue, "processes (ranks) to start on this node", ""},
             {"nnodes", FlagKind::kValue, "number of nodes", "1"},
             {"node-rank", FlagKind::kValue, "this node's index, 0 .. nnodes-1", "0"},
             {"master", FlagKind::kValue, "HOST:PORT of node 0's store (required with --nnodes > 1)",
              "127.0.0.1 and a free port"},
             {"timeout", FlagKind::kValue, "seconds any rank waits for the others (STRATA_TIMEOUT_S)", "300"}});
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
  options.nnodes = args.get_int("nnodes", 1);
  options.node_rank = args.get_int("node-rank", 0);
  options.master = args.get("master", "");
  options.timeout_s = args.get_int("timeout", 300);
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
