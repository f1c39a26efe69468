// strata train: run a solver file; resume from a snapshot or start from weights.
#include <atomic>
#include <csignal>
#include <filesystem>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <unistd.h>

#include "framework/checkpoint.h"
#include "framework/error.h"
#include "framework/file_util.h"
#include "framework/solver.h"
#include "framework/tensor.h"
#include "framework/threads.h"
#include "tools/strata/args.h"
#include "tools/strata/commands.h"

namespace strata::cli {

namespace {

std::atomic<bool> g_stop{false};

// First Ctrl-C: finish the iteration, write a snapshot, exit cleanly.
// Second Ctrl-C: leave at once (the last good snapshot stays in place, as
// snapshots are only ever replaced by rename).
void on_sigint(int) {
  if (g_stop.exchange(true)) _exit(130);
  const char msg[] = "\nstopping after this iteration and writing a snapshot (Ctrl-C again to quit now)\n";
  [[maybe_unused]] ssize_t n = write(STDERR_FILENO, msg, sizeof(msg) - 1);
}

std::set<std::string> split_list(const std::vector<std::string>& values) {
  std::set<std::string> out;
  for (const auto& v : values) {
    std::stringstream ss(v);
    std::string item;
    while (std::getline(ss, item, ',')) {
      if (!item.empty()) out.insert(item);
    }
  }
  return out;
}

}  // namespace

void apply_common_flags(const Args& args) {
  const Device device = Device::parse(args.get("device", "cpu"));
  if (!device.is_cpu()) {
    fail<ConfigError>("--device ", device.str(),
                      ": this build of strata has no CUDA backend yet; use --device cpu");
  }
  const int threads = args.get_int("threads", 0);
  if (threads < 0) fail<ConfigError>("--threads must be >= 0 (0 = all cores)");
  set_num_threads(threads);
}

int train_main(int argc, char** argv) {
  Args args("train",
            {{"solver", FlagKind::kValue, "solver prototxt", ""},
             {"weights", FlagKind::kValue, "initialise from a .safetensors weights file", ""},
             {"snapshot", FlagKind::kValue, "resume from a .solverstate.safetensors snapshot", ""},
             {"reinit", FlagKind::kRepeated, "with --weights: layers (comma-separated) left as initialised",
              ""},
             {"device", FlagKind::kValue, "cpu", "cpu"},
             {"threads", FlagKind::kValue, "CPU threads for GEMM and layer loops (0 = all cores)",
              "all cores"}});
  args.parse(argc, argv, 2);
  if (args.has("help")) {
    std::printf("%s", args.help().c_str());
    return 0;
  }
  apply_common_flags(args);
  if (args.has("weights") && args.has("snapshot")) {
    fail<ConfigError>("give --weights or --snapshot, not both (a snapshot holds its own weights)");
  }
  if (args.has("reinit") && !args.has("weights")) {
    fail<ConfigError>("--reinit only applies with --weights");
  }

  const SolverConfig config = load_solver_config(args.require("solver"));
  Solver solver(config);
  std::printf("strata train: %s, %d threads, net '%s' (%s)\n", config.source.c_str(), num_threads(),
              solver.net().name().c_str(), solver.net().memory_report().str().c_str());

  bool resumed = false;
  if (args.has("snapshot")) {
    const ResumeInfo info = solver.restore(args.get("snapshot"));
    std::printf("resumed from %s at iteration %lld\n", info.state_path.c_str(),
                static_cast<long long>(info.iter));
    if (info.config_changed) {
      std::printf("note: the solver settings differ from those of the run that wrote this snapshot\n");
    }
    resumed = true;
  } else if (args.has("weights")) {
    LoadOptions options;
    options.reinit = split_list(args.get_all("reinit"));
    const LoadReport report = load_weights(solver.net(), args.get("weights"), options);
    std::printf("%s\n", report.str().c_str());
  }

  const std::string prefix_dir = dirname_of(config.snapshot_prefix);
  if (!prefix_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(prefix_dir, ec);
    if (ec) fail<IoError>("cannot create snapshot folder '", prefix_dir, "': ", ec.message());
  }

  ConsolePrinter console(std::cout);
  JsonLinesLog log(config.log, resumed ? LogMode::kAppend : LogMode::kTruncate);
  solver.add_observer(&console);
  solver.add_observer(&log);
  solver.set_stop_flag(&g_stop);
  std::signal(SIGINT, on_sigint);
  const SolveResult result = solver.solve();
  std::signal(SIGINT, SIG_DFL);
  std::printf("log: %s\n", log.path().c_str());
  if (!result.last_snapshot.empty()) std::printf("snapshot: %s\n", result.last_snapshot.c_str());
  return result.status == SolveStatus::kInterrupted ? 130 : 0;
}

}  // namespace strata::cli
