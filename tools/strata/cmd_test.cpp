// strata test: score trained weights on the TEST phase of a net.
#include <cstdio>
#include <map>
#include <vector>

#include "framework/io/checkpoint.h"
#include "framework/error.h"
#include "framework/net.h"
#include "framework/threads.h"
#include "tools/strata/args.h"
#include "tools/strata/commands.h"
#include "transfer/pretrained.h"

namespace strata::cli {

namespace {

std::string join_names(const std::vector<std::string>& names, size_t limit = 20) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < limit; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > limit) s += ", ... (" + std::to_string(names.size() - limit) + " more)";
  return s;
}

}  // namespace

int test_main(int argc, char** argv) {
  Args args("test", {{"model", FlagKind::kValue, "net prototxt", ""},
                     {"weights", FlagKind::kValue, ".safetensors weights (a snapshot's weights file)", ""},
                     {"weights-format", FlagKind::kValue,
                      "names in the --weights file: auto, strata, torchvision-vgg, torchvision-vit, timm-vit",
                      "auto"},
                     {"iterations", FlagKind::kValue, "batches to score", "50"},
                     {"device", FlagKind::kValue, "cpu, cuda or cuda:N (builds with CUDA)", "cpu"},
                     {"threads", FlagKind::kValue, "CPU threads (0 = all cores)", "all cores"}});
  if (parse_command_flags(args, argc, argv) == FlagsParsed::kHelpShown) return 0;
  const int iterations = iterations_flag(args);
  NetOptions options;
  options.phase = Phase::kTest;
  options.device = device_flag(args);
  auto net = Net::from_file(args.require("model"), options);
  transfer::PretrainedOptions load;
  load.format = transfer::parse_weights_format(args.get("weights-format", "auto"), "--weights-format");
  const std::string weights = args.require("weights");
  const LoadReport report = transfer::load_pretrained(*net, weights, load);
  std::printf("%s\n", report.str().c_str());
  if (!report.missing.empty()) {  // scoring random values would mislead
    fail<IoError>(weights, ": ", report.missing.size(), " parameters of net '", net->name(),
                  "' are not in the file: ", join_names(report.missing));
  }

  std::map<std::string, double> sums;
  const std::vector<std::string> outputs = net->output_names();
  for (int it = 0; it < iterations; ++it) {
    net->forward();
    for (const auto& name : outputs) {
      const Blob& b = net->blob(name);
      if (b.numel() == 1) sums[name] += b.data.to(Device::cpu()).data<float>()[0];
    }
  }
  std::printf("scored %d batches\n", iterations);
  for (const auto& name : outputs) {
    if (sums.count(name)) std::printf("%s = %.6g\n", name.c_str(), sums[name] / iterations);
  }
  return 0;
}

}  // namespace strata::cli
