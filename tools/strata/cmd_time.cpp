// strata time: per-layer forward and backward wall time, averaged over
// iterations after a warm-up pass.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "framework/error.h"
#include "framework/net.h"
#include "framework/threads.h"
#include "tools/strata/args.h"
#include "tools/strata/commands.h"

namespace strata::cli {

namespace {
double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}
}  // namespace

int time_main(int argc, char** argv) {
  Args args("time", {{"model", FlagKind::kValue, "net prototxt", ""},
                     {"iterations", FlagKind::kValue, "timed iterations", "50"},
                     {"phase", FlagKind::kValue, "TRAIN or TEST", "TRAIN"},
                     {"device", FlagKind::kValue, "cpu", "cpu"},
                     {"threads", FlagKind::kValue, "CPU threads", "all cores"}});
  if (parse_command_flags(args, argc, argv) == FlagsParsed::kHelpShown) return 0;
  const int iterations = iterations_flag(args);
  NetOptions options;
  const std::string phase = args.get("phase", "TRAIN");
  if (phase != "TRAIN" && phase != "TEST") fail<ConfigError>("--phase must be TRAIN or TEST");
  options.phase = phase == "TRAIN" ? Phase::kTrain : Phase::kTest;
  auto net = Net::from_file(args.require("model"), options);
  const int n = net->num_layers();
  std::printf("net '%s': %d layers, %s, %d threads\n", net->name().c_str(), n,
              net->memory_report().str().c_str(), num_threads());

  net->forward_backward();  // warm-up: first-touch allocations, caches
  std::vector<double> fwd(n, 0.0), bwd(n, 0.0);
  double total = 0.0;
  for (int it = 0; it < iterations; ++it) {
    const double start = now_ms();
    for (int i = 0; i < n; ++i) {
      const double t0 = now_ms();
      net->forward(i, i);
      fwd[i] += now_ms() - t0;
    }
    for (int i = n - 1; i >= 0; --i) {
      const double t0 = now_ms();
      net->backward(i, i);
      bwd[i] += now_ms() - t0;
    }
    net->zero_param_diffs();
    total += now_ms() - start;
  }
  std::printf("\n%-24s %-16s %12s %12s\n", "layer", "type", "forward ms", "backward ms");
  double fsum = 0, bsum = 0;
  for (int i = 0; i < n; ++i) {
    const Layer& l = net->layer(i);
    std::printf("%-24s %-16s %12.4f %12.4f\n", l.name().c_str(), l.type().c_str(), fwd[i] / iterations,
                net->layer_needs_backward(i) ? bwd[i] / iterations : 0.0);
    fsum += fwd[i];
    bsum += bwd[i];
  }
  std::printf("%-24s %-16s %12.4f %12.4f\n", "total", "", fsum / iterations, bsum / iterations);
  std::printf("average forward-backward: %.4f ms over %d iterations\n", total / iterations, iterations);
  return 0;
}

}  // namespace strata::cli
