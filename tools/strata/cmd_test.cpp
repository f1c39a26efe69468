// strata test: score trained weights on the TEST phase of a net.
#include <cstdio>
#include <map>
#include <optional>
#include <vector>

#include "framework/io/checkpoint.h"
#include "framework/error.h"
#include "framework/net.h"
#include "framework/solver/precision.h"
#include "framework/cpu/threads.h"
#include "tools/strata/args.h"
#ifdef STRATA_WITH_CUDA
#include "framework/cuda/device_api.h"
#endif
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

// Scalar outputs summed where they lie: on a GPU nothing is read back until
// the end, so the device is never idle between batches (the losses a TEST
// net computes go to a sum here too instead of being read after each forward).
class OutputSums {
 public:
  OutputSums(Device device, size_t count) : device_(device), host_(count, 0.0) {
#ifdef STRATA_WITH_CUDA
    if (!device_.is_cpu()) {
      device_sums_ = static_cast<double*>(cuda::device_malloc(count * sizeof(double), device_.index));  // zeroed
    }
#endif
  }
  ~OutputSums() {
#ifdef STRATA_WITH_CUDA
    if (device_sums_) cuda::device_free(device_sums_, device_.index);
#endif
  }
  OutputSums(const OutputSums&) = delete;
  OutputSums& operator=(const OutputSums&) = delete;

  double* slot(size_t k) { return device_sums_ ? device_sums_ + k : host_.data() + k; }
  // sum[k] += value (one f32 element), in double.
  void add(size_t k, const Tensor& value) {
#ifdef STRATA_WITH_CUDA
    if (device_sums_) {
      cuda::add_weighted_loss(device_sums_ + k, value.device_data<float>(), 1.0f, device_.index);
      return;
    }
#endif
    host_[k] += static_cast<double>(value.data<float>()[0]);
  }
  std::vector<double> read() {
#ifdef STRATA_WITH_CUDA
    if (device_sums_) {
      cuda::copy_bytes(host_.data(), -1, device_sums_, device_.index, host_.size() * sizeof(double));
    }
#endif
    return host_;
  }

 private:
  Device device_;
  std::vector<double> host_;
  double* device_sums_ = nullptr;
};

// Batches for one pass over the TEST data (the largest data layer's, when
// the net reads from data layers that know their size); 0 when none does.
int64_t batches_per_pass(const Net& net, std::string* what) {
  int64_t best = 0;
  for (int i = 0; i < net.num_layers(); ++i) {
    const std::optional<Layer::PassSize> known = net.layer(i).pass_size();
    if (!known || known->batch <= 0) continue;
    const int64_t samples = known->samples, batch = known->batch;
    const int64_t batches = (samples + batch - 1) / batch;
    if (batches > best) {
      best = batches;
      *what = std::to_string(samples) + " samples of layer '" + net.layer(i).name() + "' in batches of " +
              std::to_string(batch) + (samples % batch ? " (the last batch wraps around to the first samples)" : "");
    }
  }
  return best;
}

}  // namespace

int test_main(int argc, char** argv) {
  Args args("test", {{"model", FlagKind::kValue, "net prototxt", ""},
                     {"weights", FlagKind::kValue, ".safetensors weights (a snapshot's weights file)", ""},
                     {"weights-format", FlagKind::kValue,
                      "names in the --weights file: auto, strata, torchvision-vgg, torchvision-vit, timm-vit, caffe",
                      "auto"},
                     {"iterations", FlagKind::kValue, "batches to score",
                      "one pass over the TEST data, else 50"},
                     {"device", FlagKind::kValue, "cpu, cuda or cuda:N (builds with CUDA)", "cpu"},
                     {"precision", FlagKind::kValue,
                      "FP32, TF32 (GPU), BF16 or FP16: BF16/FP16 store activations in 16 bits", "FP32"},
                     {"channels-last", FlagKind::kSwitch,
                      "store the image blobs between convolutions NHWC (the solver's channels_last)", ""},
                     {"threads", FlagKind::kValue, "CPU threads (0 = all cores)", "all cores"}});
  if (parse_command_flags(args, argc, argv) == FlagsParsed::kHelpShown) return 0;
  NetOptions options;
  options.phase = Phase::kTest;
  options.device = device_flag(args);
  options.blob_memory = BlobMemory::kByLifetime;  // forward only: each value until its last reader
  const Precision precision = parse_precision(args.get("precision", "FP32"), "--precision");
  apply_precision(precision, options.device, "--precision");
  options.storage_dtype = storage_dtype_of(precision);
  options.channels_last = args.has("channels-last");
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

  // Not a fixed count: 50 batches of 120 read a 360-image test set 16.7 times.
  std::string pass;
  const int64_t per_pass = batches_per_pass(*net, &pass);
  const int iterations = args.has("iterations") || per_pass == 0 ? iterations_flag(args) : static_cast<int>(per_pass);
  if (!args.has("iterations")) {
    std::printf("%s\n", per_pass > 0 ? ("scoring one pass: " + pass).c_str()
                                      : "the net's data layers do not say how many samples they hold: scoring 50 "
                                        "batches (--iterations N to choose)");
  }

  const std::vector<std::string> outputs = net->output_names();
  OutputSums sums(net->device(), outputs.size() + 1);  // the last: the losses forward would read
  net->set_loss_sink(sums.slot(outputs.size()));
  for (int it = 0; it < iterations; ++it) {
    net->forward();
    for (size_t k = 0; k < outputs.size(); ++k) {
      const Blob& b = net->blob(outputs[k]);
      if (b.numel() == 1) sums.add(k, b.data);
    }
  }
  net->set_loss_sink(nullptr);
  const std::vector<double> totals = sums.read();
  std::printf("scored %d batches\n", iterations);
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (net->blob(outputs[k]).numel() == 1) std::printf("%s = %.6g\n", outputs[k].c_str(), totals[k] / iterations);
  }
  return 0;
}

}  // namespace strata::cli
