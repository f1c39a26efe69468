// strata time: per-layer forward and backward time, averaged over
// iterations after a warm-up pass: wall time on the CPU, GPU time measured
// with CUDA events on the compute stream with --device cuda, where each
// convolution also shows the cuDNN algorithms it runs. --out writes them as
// a times file (parallel/estimate/times_file.h) for strata estimate. --pp
// prints the pipeline balancer's cuts beside the measured times.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "framework/error.h"
#include "framework/net.h"
#include "framework/cpu/threads.h"
#include "parallel/estimate/times_file.h"
#include "parallel/model_parallel/pipeline_balance.h"
#include "tools/strata/args.h"
#include "tools/strata/commands.h"
#include "tools/strata/flag_lists.h"
#include "tools/strata/layer_timing.h"

namespace strata::cli {

namespace {

// For each stage count: the cut the balancer makes from each of its cost
// sources, each weighed with the times measured here, so the sources can be
// compared with what the stages would really take.
void print_balancer_cuts(const std::string& model, const Net& net, const LayerTimes& times,
                         const std::string& counts) {
  const ConfigNode root = parse_config_file(model);
  std::vector<double> measured_s(static_cast<size_t>(net.num_layers()));
  for (size_t i = 0; i < measured_s.size(); ++i) measured_s[i] = (times.forward_ms[i] + times.backward_ms[i]) / 1e3;
  const std::vector<parallel::LayerCost> measured = parallel::costs_by_train_layer(root, net, measured_s);
  const std::vector<std::pair<std::string, std::vector<parallel::LayerCost>>> sources = {
      {"the cost model of layer kinds (strata train under --max-memory)", parallel::model_layer_costs(root)},
      {"the FLOPs and bytes the layers declare at these shapes",
       parallel::costs_by_train_layer(root, net, parallel::declared_seconds(net))},
      {"the times measured here (strata train measures them on rank 0)", measured},
  };
  for (const std::string& text : split_list({counts})) {
    char* end = nullptr;
    const long stages = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || stages < 1) fail<ConfigError>("--pp: '", text, "' is not a stage count");
    std::printf("\npipeline stages at pp %ld, each cut weighed with the times measured here:\n", stages);
    for (const auto& [what, costs] : sources) {
      const std::vector<int> cut = parallel::balance_stages(costs, static_cast<int>(stages));
      std::printf("cut from %s:\n%s", what.c_str(),
                  parallel::describe_balance(measured, cut, static_cast<int>(stages), "measured balance").c_str());
    }
  }
}

}  // namespace

int time_main(int argc, char** argv) {
  Args args("time", {{"model", FlagKind::kValue, "net prototxt", ""},
                     {"iterations", FlagKind::kValue, "timed iterations", "50"},
                     {"phase", FlagKind::kValue, "TRAIN or TEST", "TRAIN"},
                     {"out", FlagKind::kValue, "also write the per-layer times as CSV (input of strata estimate --times)", ""},
                     {"device", FlagKind::kValue, "cpu, cuda or cuda:N (builds with CUDA; GPU times from CUDA events)", "cpu"},
                     {"threads", FlagKind::kValue, "CPU threads", "all cores"},
                     {"blob-memory", FlagKind::kValue,
                      "BY_LIFETIME (as strata train: values and gradients placed by lifetime in one arena) or "
                      "SEPARATE (Caffe's layout: every blob its own value and gradient)",
                      "BY_LIFETIME"},
                     {"pp", FlagKind::kValue,
                      "pipeline stage counts (e.g. 2,4): print the balancer's cut for each, from each of its cost "
                      "sources, beside the measured times",
                      ""}});
  if (parse_command_flags(args, argc, argv) == FlagsParsed::kHelpShown) return 0;
  const int iterations = iterations_flag(args);
  NetOptions options;
  const std::string phase = args.get("phase", "TRAIN");
  if (phase != "TRAIN" && phase != "TEST") fail<ConfigError>("--phase must be TRAIN or TEST");
  options.phase = phase == "TRAIN" ? Phase::kTrain : Phase::kTest;
  options.device = device_flag(args);
  const std::string memory = args.get("blob-memory", "BY_LIFETIME");
  if (memory != "BY_LIFETIME" && memory != "SEPARATE") {
    fail<ConfigError>("--blob-memory: expected BY_LIFETIME or SEPARATE, got '", memory, "'");
  }
  options.blob_memory = memory == "SEPARATE" ? BlobMemory::kSeparate : BlobMemory::kByLifetime;
  auto net = Net::from_file(args.require("model"), options);
  const int n = net->num_layers();
  std::printf("net '%s': %d layers, %s, %d threads\n", net->name().c_str(), n,
              net->memory_report().str().c_str(), num_threads());

  const LayerTimes times = measure_layer_times(*net, iterations);
  if (!options.device.is_cpu() || !net->recompute_ranges().empty()) std::printf("%s\n", times.note.c_str());
  // What the layers chose at run time (a convolution's cuDNN algorithms):
  // a last column, present only when some layer has something to say.
  std::vector<std::string> runtime(static_cast<size_t>(n));
  bool any_runtime = false;
  for (int i = 0; i < n; ++i) {
    runtime[static_cast<size_t>(i)] = net->layer(i).describe_runtime();
    any_runtime = any_runtime || !runtime[static_cast<size_t>(i)].empty();
  }
  std::printf("\n%-24s %-16s %12s %12s%s\n", "layer", "type", "forward ms", "backward ms",
              any_runtime ? "  runtime choice" : "");
  double fsum = 0, bsum = 0;
  for (int i = 0; i < n; ++i) {
    const Layer& l = net->layer(i);
    const std::string& choice = runtime[static_cast<size_t>(i)];
    std::printf("%-24s %-16s %12.4f %12.4f%s%s\n", l.name().c_str(), l.type().c_str(), times.forward_ms[i],
                times.backward_ms[i], choice.empty() ? "" : "  ", choice.c_str());
    fsum += times.forward_ms[i];
    bsum += times.backward_ms[i];
  }
  std::printf("%-24s %-16s %12.4f %12.4f\n", "total", "", fsum, bsum);
  std::printf("average forward-backward: %.4f ms over %d iterations\n", times.step_ms, iterations);
  if (args.has("pp")) {
    if (options.phase != Phase::kTrain) fail<ConfigError>("--pp: pipeline stages are cut from a TRAIN net; drop --phase TEST");
    print_balancer_cuts(args.require("model"), *net, times, args.get("pp"));
  }
  if (args.has("out")) {
    const std::string out = args.get("out");
    estimate::write_times_file(out, step_profile(*net, times),
                               "strata time --model " + args.get("model") + ": " + times.note + ", " +
                                   std::to_string(iterations) + " iterations, phase " + phase);
    std::printf("wrote %s\n", out.c_str());
  }
  return 0;
}

}  // namespace strata::cli
