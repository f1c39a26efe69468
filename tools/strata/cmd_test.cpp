// strata test: score trained weights on the TEST phase of a net.
#include <cstdio>
#include <map>
#include <vector>

#include "framework/checkpoint.h"
#include "framework/net.h"
#include "framework/threads.h"
#include "tools/strata/args.h"
#include "tools/strata/commands.h"

namespace strata::cli {

int test_main(int argc, char** argv) {
  Args args("test", {{"model", FlagKind::kValue, "net prototxt", ""},
                     {"weights", FlagKind::kValue, ".safetensors weights (a snapshot's weights file)", ""},
                     {"iterations", FlagKind::kValue, "batches to score", "50"},
                     {"device", FlagKind::kValue, "cpu", "cpu"},
                     {"threads", FlagKind::kValue, "CPU threads (0 = all cores)", "all cores"}});
  if (parse_command_flags(args, argc, argv) == FlagsParsed::kHelpShown) return 0;
  const int iterations = iterations_flag(args);
  NetOptions options;
  options.phase = Phase::kTest;
  auto net = Net::from_file(args.require("model"), options);
  LoadOptions load;
  load.missing = MissingParams::kError;
  const LoadReport report = load_weights(*net, args.require("weights"), load);
  std::printf("%s\n", report.str().c_str());

  std::map<std::string, double> sums;
  const std::vector<std::string> outputs = net->output_names();
  for (int it = 0; it < iterations; ++it) {
    net->forward();
    for (const auto& name : outputs) {
      const Blob& b = net->blob(name);
      if (b.numel() == 1) sums[name] += b.data.data<float>()[0];
    }
  }
  std::printf("scored %d batches\n", iterations);
  for (const auto& name : outputs) {
    if (sums.count(name)) std::printf("%s = %.6g\n", name.c_str(), sums[name] / iterations);
  }
  return 0;
}

}  // namespace strata::cli
