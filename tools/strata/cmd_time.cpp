// strata time: per-layer forward and backward time, averaged over
// iterations after a warm-up pass: wall time on the CPU, GPU time measured
// with CUDA events on the compute stream with --device cuda.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "framework/error.h"
#ifdef STRATA_WITH_CUDA
#include "framework/cuda/device_api.h"
#include "framework/cuda/streams.h"
#endif
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
                     {"device", FlagKind::kValue, "cpu, cuda or cuda:N (builds with CUDA; GPU times from CUDA events)", "cpu"},
                     {"threads", FlagKind::kValue, "CPU threads", "all cores"}});
  if (parse_command_flags(args, argc, argv) == FlagsParsed::kHelpShown) return 0;
  const int iterations = iterations_flag(args);
  NetOptions options;
  const std::string phase = args.get("phase", "TRAIN");
  if (phase != "TRAIN" && phase != "TEST") fail<ConfigError>("--phase must be TRAIN or TEST");
  options.phase = phase == "TRAIN" ? Phase::kTrain : Phase::kTest;
  options.device = device_flag(args);
  auto net = Net::from_file(args.require("model"), options);
  const int n = net->num_layers();
  std::printf("net '%s': %d layers, %s, %d threads\n", net->name().c_str(), n,
              net->memory_report().str().c_str(), num_threads());

  net->forward_backward();  // warm-up: first-touch allocations, caches
  std::vector<double> fwd(n, 0.0), bwd(n, 0.0);
  double total = 0.0;
#ifdef STRATA_WITH_CUDA
  if (!options.device.is_cpu()) {
    // Each layer between two events on the compute stream: GPU time, not
    // launch time. One synchronisation per iteration reads them all.
    const int dev = options.device.index;
    cuda::synchronize(dev);
    std::vector<cuda::EventTimer> f_timers(n), b_timers(n);
    cuda::EventTimer whole;
    for (int it = 0; it < iterations; ++it) {
      whole.start();
      for (int i = 0; i < n; ++i) {
        f_timers[i].start();
        net->forward(i, i);
        f_timers[i].stop();
      }
      for (int i = n - 1; i >= 0; --i) {
        b_timers[i].start();
        net->backward(i, i);
        b_timers[i].stop();
      }
      net->zero_param_diffs();
      whole.stop();
      total += whole.elapsed_ms();
      for (int i = 0; i < n; ++i) {
        fwd[i] += f_timers[i].elapsed_ms();
        bwd[i] += b_timers[i].elapsed_ms();
      }
    }
    std::printf("GPU times from CUDA events on %s; %s\n", options.device.str().c_str(),
                cuda::memory_report(dev).c_str());
  }
#endif
  for (int it = 0; it < iterations && options.device.is_cpu(); ++it) {
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
