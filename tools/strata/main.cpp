// strata: train, test and time networks described in prototxt files.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "framework/cpu/cpu_isa.h"
#include "framework/config/config.h"
#include "framework/error.h"
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
      "  estimate  predicted speedup of parallel strategies: strata estimate --model M --workers 1,2,4 --link 25gbe\n"
      "  embed   features of images: strata embed --model M --weights W --layer B --images DIR --out F.npy\n"
      "  convert Caffe weights to safetensors: strata convert model.caffemodel out.safetensors\n"
      "  layers  list the registered layer types (and the library each came from)\n"
      "  check-layers  the generic layer checks: strata check-layers --plugin lib.so\n\n"
      "`strata COMMAND --help` lists a command's flags. Every command but launch takes\n"
      "--plugin PATH (repeatable): a layer library built against this strata (find_package(strata));\n"
      "STRATA_PLUGINS=a.so:b.so loads libraries for every command.\n");
}

// "strata train: error: strata train: ..." reads as a stutter: messages
// that already name the command keep their own prefix only.
std::string without_prefix(const std::string& message, const std::string& cmd) {
  const std::string own = "strata " + cmd + ": ";
  return message.compare(0, own.size(), own) == 0 ? message.substr(own.size()) : message;
}

// Error text quotes what it found, and what it found may be binary (a
// weights file passed as --solver): control bytes and invalid UTF-8 are
// shown as \xNN rather than sent to the terminal, where an escape sequence
// would act instead of print.
std::string printable(const std::string& text) {
  std::string out;
  auto hex = [&](unsigned char u) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02X", static_cast<unsigned>(u));
    out += buf;
  };
  for (size_t i = 0; i < text.size();) {
    const auto u = static_cast<unsigned char>(text[i]);
    if (u == '\n' || u == '\t' || (u >= 0x20 && u < 0x7f)) {
      out += text[i++];
      continue;
    }
    // A well-formed UTF-8 sequence (2-4 bytes) passes as it is.
    const size_t len = (u & 0xE0) == 0xC0 ? 2 : (u & 0xF0) == 0xE0 ? 3 : (u & 0xF8) == 0xF0 ? 4 : 0;
    bool ok = len > 0 && i + len <= text.size() && u >= 0xC2 && u <= 0xF4;
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
    if (ok) {
      out.append(text, i, len);
      i += len;
    } else {
      hex(u);
      ++i;
    }
  }
  return out;
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
    strata::cpu_isa();  // a bad STRATA_CPU_ISA is named before any work starts
    if (cmd != "launch") argc = strata::cli::load_plugin_flags(argc, argv);
    if (cmd == "train") return strata::cli::train_main(argc, argv);
    if (cmd == "test") return strata::cli::test_main(argc, argv);
    if (cmd == "time") return strata::cli::time_main(argc, argv);
    if (cmd == "launch") return strata::cli::launch_main(argc, argv);
    if (cmd == "embed") return strata::cli::embed_main(argc, argv);
    if (cmd == "estimate") return strata::cli::estimate_main(argc, argv);
    if (cmd == "convert") return strata::cli::convert_main(argc, argv);
    if (cmd == "layers") return strata::cli::layers_main(argc, argv);
    if (cmd == "check-layers") return strata::cli::check_layers_main(argc, argv);
    const std::string near = strata::nearest_key(
        cmd, {"train", "test", "time", "launch", "embed", "estimate", "convert", "layers", "check-layers"});
    std::fprintf(stderr, "strata: unknown command '%s'%s\n\n", printable(cmd).c_str(),
                 near.empty() ? "" : ("; did you mean '" + near + "'?").c_str());
    usage();
    return 2;
  } catch (const strata::Error& e) {
    std::fprintf(stderr, "strata %s: error: %s\n", cmd.c_str(), printable(without_prefix(e.what(), cmd)).c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata %s: internal error: %s\n", cmd.c_str(),
                 printable(without_prefix(e.what(), cmd)).c_str());
    return 1;
  }
}
