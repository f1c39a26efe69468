// strata convert: Caffe weights to safetensors.
//   strata convert model.caffemodel out.safetensors [--overwrite]
// The work is transfer/caffemodel.h's; this parses the two paths.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "framework/error.h"
#include "framework/io/file_util.h"
#include "tools/strata/commands.h"
#include "transfer/caffemodel.h"

namespace strata::cli {

namespace {

const char* const kUsage =
    "usage: strata convert IN.caffemodel OUT.safetensors [--overwrite]\n\n"
    "Writes the blobs of Caffe's binary weights (a NetParameter; layer, legacy V1 `layers` and V0 entries,\n"
    "old num/channels/height/width and new shape fields) as float32 tensors named <layer>.<param>:\n"
    "weight and bias, BatchNorm's running_mean and running_var (divided by Caffe's scale factor blob),\n"
    "InnerProduct weights as [out, in]. `strata train --weights IN.caffemodel` loads the file directly.\n"
    "An existing OUT is replaced only with --overwrite; OUT may never be IN.\n";

}  // namespace

int convert_main(int argc, char** argv) {
  std::vector<std::string> paths;
  Overwrite overwrite = Overwrite::kNo;
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::printf("%s", kUsage);
      return 0;
    }
    if (!std::strcmp(argv[i], "--overwrite")) {
      overwrite = Overwrite::kYes;
      continue;
    }
    if (argv[i][0] == '-' && argv[i][1] == '-') {
      fail<ConfigError>("unknown flag ", argv[i], "; strata convert takes two paths, IN.caffemodel OUT.safetensors, "
                        "and --overwrite");
    }
    paths.push_back(argv[i]);
  }
  if (paths.size() != 2) {
    fail<ConfigError>("expected two paths, IN.caffemodel OUT.safetensors, got ", paths.size(),
                      " (see strata convert --help)");
  }
  const std::string in = paths[0], out = paths[1];
  // Before reading: never the input, and an existing file only with --overwrite.
  check_output_path("OUT", out, {{"IN", in}}, overwrite, nullptr);
  const size_t n = transfer::convert_caffemodel(in, out);
  std::printf("wrote %zu tensors from %s to %s\n", n, in.c_str(), out.c_str());
  return 0;
}

}  // namespace strata::cli
