// strata: train, test and time networks described in prototxt files.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "tools/strata/commands.h"

namespace {

void usage() {
  std::printf(
      "usage: strata COMMAND [flags]\n\n"
      "commands:\n"
      "  train   train a net: strata train --solver models/digits/solver.prototxt\n"
      "  test    score trained weights: strata test --model M --weights W [--iterations N]\n"
      "  time    per-layer forward/backward timing: strata time --model M [--iterations N]\n"
      "  launch  run N ranks of a command: strata launch --nproc N -- strata train --solver S\n"
      "  embed   features of images: strata embed --model M --weights W --layer B --images DIR --out F.npy\n"
      "  layers  list the registered layer types\n\n"
      "`strata COMMAND --help` lists a command's flags.\n");
}

int layers_main() {
  for (const auto& t : strata::LayerRegistry::instance().types()) {
    const auto schema = strata::LayerRegistry::instance().find(t).schema();
    std::printf("%-18s %s\n", t.c_str(), schema.summary.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Under a launcher stdout is a pipe, which stdio would buffer fully: keep
  // progress lines flowing as they are printed.
  if (std::getenv("STRATA_RANK") || std::getenv("OMPI_COMM_WORLD_RANK") || std::getenv("SLURM_PROCID")) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
  }
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "train") return strata::cli::train_main(argc, argv);
    if (cmd == "test") return strata::cli::test_main(argc, argv);
    if (cmd == "time") return strata::cli::time_main(argc, argv);
    if (cmd == "launch") return strata::cli::launch_main(argc, argv);
    if (cmd == "embed") return strata::cli::embed_main(argc, argv);
    if (cmd == "layers") return layers_main();
    std::fprintf(stderr, "strata: unknown command '%s'\n\n", cmd.c_str());
    usage();
    return 2;
  } catch (const strata::Error& e) {
    std::fprintf(stderr, "strata %s: error: %s\n", cmd.c_str(), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata %s: internal error: %s\n", cmd.c_str(), e.what());
    return 1;
  }
}
