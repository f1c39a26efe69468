// Inference throughput of strata (forward only, no gradients) on the deploy
// nets of models/, with synthetic inputs already on the device: the
// steady-state rate that tools/bench/run_gpu_bench.py compares with PyTorch
// eager and torch.compile (tools/bench/torch_throughput.py --task infer).
// `strata embed` (start-up, input reading and the copies back included) is
// timed separately by the same script.
//
//   strata_bench_infer --models vgg16,vit_b16 --device cuda --precision BF16 --batch 64
//
// Prints one JSON object per model: {"impl":"strata","task":"infer","model":...,
// "samples_per_s": median of --repeats timed runs of --iters forward passes,
// "peak_allocated_bytes": the caching allocator's peak, ...}.
//
// --save-weights DIR writes each model's initial weights to
// DIR/<model>.safetensors in strata's names, for `strata embed --weights
// ... --weights-format strata`, and skips the timing.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/error.h"
#include "framework/io/checkpoint.h"
#include "framework/net.h"
#include "framework/rng.h"
#include "framework/cpu/threads.h"
#include "framework/solver/precision.h"
#include "tools/bench/bench_device.h"

namespace {

using namespace strata;

// The batches of strata_bench_train and tools/bench/torch_throughput.py.
struct InferModel {
  std::string name;
  Shape input;        // per sample
  int64_t batch;      // on the CPU
  int64_t gpu_batch;  // on a GPU
};

const std::vector<InferModel> kModels = {{"vgg16", {3, 224, 224}, 8, 64}, {"vit_b16", {3, 224, 224}, 8, 64}};

// models/<name>/deploy.prototxt with its Input layer's batch set to `batch`
// (the file declares 1); the net-level keys other than `name` (such as
// `preset:`, which is for `strata embed`) are left out.
ConfigNode deploy_net(const std::string& source_dir, const InferModel& m, int64_t batch) {
  const ConfigNode root = parse_config_file(source_dir + "/models/" + m.name + "/deploy.prototxt");
  std::ostringstream net;
  net << "name: \"" << m.name << "\"\n";
  net << "layer { name: \"data\" type: \"Input\" top: \"data\" input_param { shape { dim: " << batch;
  for (int64_t d : m.input) net << " dim: " << d;
  net << " } } }\n";
  for (const ConfigNode* layer : root.all("layer")) {
    if (layer->get_string("type") == "Input") continue;
    net << layer->to_string() << "\n";
  }
  return parse_config_text(net.str(), m.name + " (deploy, batch " + std::to_string(batch) + ")");
}

}  // namespace

int main(int argc, char** argv) {
  std::string models = "vgg16,vit_b16";
  std::string source_dir = STRATA_SOURCE_DIR;
  std::string device_name = "cpu", precision = "FP32", save_dir;
  int64_t batch_override = 0;
  int threads = 2, iters = 20, warmup = 5, repeats = 5;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "strata_bench_infer: %s needs a value\n", flag.c_str());
      return 2;
    }
    const std::string value = argv[i + 1];
    if (flag == "--models") models = value;
    else if (flag == "--threads") threads = std::atoi(value.c_str());
    else if (flag == "--iters") iters = std::atoi(value.c_str());
    else if (flag == "--warmup") warmup = std::atoi(value.c_str());
    else if (flag == "--repeats") repeats = std::atoi(value.c_str());
    else if (flag == "--source-dir") source_dir = value;
    else if (flag == "--device") device_name = value;
    else if (flag == "--precision") precision = value;
    else if (flag == "--batch") batch_override = std::atoll(value.c_str());
    else if (flag == "--save-weights") save_dir = value;
    else {
      std::fprintf(stderr,
                   "strata_bench_infer: unknown flag %s (flags: --models --threads --iters --warmup --repeats "
                   "--source-dir --device --precision --batch --save-weights)\n",
                   flag.c_str());
      return 2;
    }
  }
  if (iters < 1 || repeats < 1 || warmup < 0) {
    std::fprintf(stderr, "strata_bench_infer: --iters and --repeats must be >= 1 and --warmup >= 0\n");
    return 2;
  }
  try {
    set_num_threads(threads);
    const Device device = Device::parse(device_name);
    bench::use_device(device);
    // As the solver sets it for training (framework/solver/precision.h): the
    // GPU's math, and activations stored in 16 bits in BF16 and FP16.
    const Precision p = parse_precision(precision, "--precision");
    apply_precision(p, device, "--precision");
    std::stringstream list(models);
    std::string name;
    while (std::getline(list, name, ',')) {
      auto it = std::find_if(kModels.begin(), kModels.end(), [&](const InferModel& m) { return m.name == name; });
      if (it == kModels.end()) fail<ConfigError>("unknown inference model '", name, "' (vgg16, vit_b16)");
      const int64_t batch = batch_override > 0 ? batch_override : device.is_cpu() ? it->batch : it->gpu_batch;
      bench::reset_peak_memory(device);
      NetOptions options;
      options.phase = Phase::kTest;
      options.device = device;
      options.blob_memory = BlobMemory::kByLifetime;  // as `strata test` and `strata embed` run
      options.storage_dtype = storage_dtype_of(p);
      options.base_dir = source_dir + "/models/" + name;
      Net net(deploy_net(source_dir, *it, batch), options);
      if (!save_dir.empty()) {
        const std::string path = save_dir + "/" + name + ".safetensors";
        save_weights(net, path);
        std::printf("{\"model\": \"%s\", \"weights\": \"%s\"}\n", name.c_str(), path.c_str());
        std::fflush(stdout);
        continue;
      }
      Rng rng(1);
      bench::fill_gaussian(net.blob("data"), rng);
      for (int i = 0; i < warmup; ++i) net.forward();
      bench::wait_for(device);
      std::vector<double> runs;
      for (int r = 0; r < repeats; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) net.forward();
        bench::wait_for(device);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        runs.push_back(static_cast<double>(batch) * iters / s);
      }
      const bench::PeakMemory peak = bench::peak_memory(device);
      std::printf("{\"impl\": \"strata\", \"task\": \"infer\", \"model\": \"%s\", \"batch\": %lld, "
                  "\"threads\": %d, \"device\": \"%s\", \"precision\": \"%s\", \"peak_allocated_bytes\": %zu, "
                  "\"peak_reserved_bytes\": %zu, \"samples_per_s\": %.3f, \"runs\": [",
                  name.c_str(), static_cast<long long>(batch), num_threads(), device.str().c_str(),
                  precision.c_str(), peak.allocated, peak.reserved, bench::median(runs));
      for (size_t r = 0; r < runs.size(); ++r) std::printf("%s%.3f", r ? ", " : "", runs[r]);
      std::printf("]}\n");
      std::fflush(stdout);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "strata_bench_infer: %s\n", e.what());
    return 1;
  }
  return 0;
}
