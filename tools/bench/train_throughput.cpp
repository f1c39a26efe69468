// Training throughput of strata (forward + backward + SGD update, float32) on
// the models in models/, with synthetic inputs, for comparison with
// tools/bench/torch_train_throughput.py. tools/bench/run_train_bench.py runs
// the two alternately and prints the table recorded in docs/benchmarks.md.
//
//   strata_bench_train --models mlp,lenet,cifar_vgg --threads 2 --iters 20 --repeats 5
//
// Prints one JSON object per model: {"impl":"strata","model":...,"samples_per_s":median,...},
// with the start-up plan's total and the process's tensor peak (planned_bytes,
// tensor_peak_bytes). `--blob-memory SEPARATE` trains in Caffe's layout;
// `--recompute blocks` recomputes every ViT block and VGG stage in backward;
// `--fuse off` runs every ReLU's own forward and every residual sum's (the
// solver's fuse_epilogues); `--channels-last on` stores the image blobs
// between convolutions NHWC (the solver's channels_last). The steps are timed as `strata train` runs them
// (Solver::run_steps): on a GPU each step's results are read while the next
// runs, and from the second step the step replays as a CUDA graph; the CPU
// reads every step.
//
// On a GPU (a build with CUDA):
//   strata_bench_train --device cuda --precision BF16 --models cifar_vgg,vgg16
// trains on the device in the given precision (FP32, TF32, BF16, FP16) with
// the GPU batches (cifar_vgg 128, vgg16 and vit_b16 at 224x224 64; --batch
// overrides) and also reports the caching allocator's peak allocated and
// reserved bytes, and the peak of the timed steps alone (the steady peak,
// without setup and cuDNN's timing of new shapes). tools/bench/run_gpu_bench.py runs it against PyTorch eager
// and torch.compile.
//
// Under `strata launch --nproc N` it trains data-parallel: each rank gets
// batch/N samples (the global batch stays the model's), gradients are
// averaged over tcp, and rank 0 reports the global samples/s and the share of
// step time spent waiting for communication.
#include <algorithm>
#include <chrono>
#include <regex>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "framework/byte_size.h"
#include "framework/config/config.h"
#include "framework/io/file_util.h"
#include "framework/memory_cap.h"
#include "framework/error.h"
#include "framework/rng.h"
#include "framework/solver/solver.h"
#include "framework/cpu/threads.h"
#include "parallel/backends/communicator_factory.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel/rendezvous/env.h"
#include "tools/bench/bench_device.h"

namespace {

using namespace strata;

struct BenchModel {
  std::string name;
  Shape input;  // per sample
  int64_t batch;      // on the CPU
  int64_t gpu_batch;  // on a GPU
};

const std::vector<BenchModel> kModels = {{"mlp", {1, 28, 28}, 128, 128},
                                         {"lenet", {1, 28, 28}, 64, 64},
                                         {"cifar_vgg", {3, 32, 32}, 32, 128},
                                         {"vgg16", {3, 224, 224}, 8, 64},
                                         {"vit_b16", {3, 224, 224}, 8, 64},
                                         {"resnet50", {3, 224, 224}, 8, 64}};

// The model's TRAIN net with its data layer replaced by an Input layer of the
// benchmark's shape, wrapped in an SGD solver config (momentum 0.9, weight
// decay 5e-4: the PyTorch script's settings).
// With `recompute`, every ViT block (blockK_ln1 .. blockK_add2) and every
// VGG stage (convK_1 .. poolK) is a recompute range.
std::string solver_text(const std::string& source_dir, const BenchModel& m, int64_t batch,
                        const std::string& precision, const std::string& blob_memory, bool recompute,
                        bool fuse, bool channels_last) {
  // A model without a train.prototxt (vgg16, vit_b16) is benchmarked from
  // its deploy net with a SoftmaxWithLoss on its last top (1000 logits); one
  // with neither (resnet50) from its benchmark.prototxt, which has its loss.
  const std::string dir = source_dir + "/models/" + m.name;
  const std::string file = file_exists(dir + "/train.prototxt")    ? "/train.prototxt"
                           : file_exists(dir + "/deploy.prototxt") ? "/deploy.prototxt"
                                                                   : "/benchmark.prototxt";
  const ConfigNode root = parse_config_file(dir + file);
  std::ostringstream net;
  net << "name: \"" << m.name << "\"\n";
  net << "layer { name: \"input\" type: \"Input\" top: \"data\" top: \"label\" input_param { shape { dim: "
      << batch;
  for (int64_t d : m.input) net << " dim: " << d;
  net << " } shape { dim: " << batch << " } } }\n";
  std::string last_top, range_start;
  std::vector<std::pair<std::string, std::string>> ranges;
  const std::regex starts("block[0-9]+_ln1|conv[0-9]+_1"), ends("block[0-9]+_add2|pool[0-9]+");
  bool has_loss = false;
  for (const ConfigNode* layer : root.all("layer")) {
    const std::string type = layer->get_string("type");
    if (type.size() >= 4 && type.compare(type.size() - 4, 4, "Data") == 0) continue;
    if (type == "Input") continue;
    if (layer->has("include")) continue;  // TEST-only layers (Accuracy)
    has_loss = has_loss || type.find("Loss") != std::string::npos;
    if (layer->has("top")) last_top = layer->get_string("top");
    net << layer->to_string() << "\n";
    const std::string name = layer->get_string("name");
    if (std::regex_match(name, starts)) range_start = name;
    if (std::regex_match(name, ends) && !range_start.empty()) {
      ranges.emplace_back(range_start, name);
      range_start.clear();
    }
  }
  if (recompute) {
    if (ranges.empty()) fail<ConfigError>("--recompute: model '", m.name, "' has no ViT blocks or VGG stages to recompute");
    for (const auto& [from, to] : ranges) net << "recompute { from: \"" << from << "\" to: \"" << to << "\" }\n";
  }
  if (!has_loss) {
    net << "layer { name: \"loss\" type: \"SoftmaxWithLoss\" bottom: \"" << last_top
        << "\" bottom: \"label\" top: \"loss\" }\n";
  }
  std::ostringstream solver;
  solver << "net_param {\n" << net.str() << "}\n"
         << "base_lr: 0.01 momentum: 0.9 weight_decay: 0.0005 max_iter: 1000000 display: 0\n"
         << "test_interval: 0 snapshot: 0 snapshot_after_train: false\n"
         << "precision: " << precision << "\n"
         << "blob_memory: " << blob_memory << "\n"
         << "fuse_epilogues: " << (fuse ? "true" : "false") << "\n"
         << "channels_last: " << (channels_last ? "true" : "false") << "\n";
  return solver.str();
}

}  // namespace

int main(int argc, char** argv) {
  std::string models = "mlp,lenet,cifar_vgg";
  std::string source_dir = STRATA_SOURCE_DIR;
  std::string device_name = "cpu", precision = "FP32", blob_memory = "BY_LIFETIME";
  bool recompute = false, fuse = true, channels_last = false;
  int64_t batch_override = 0;
  int threads = 2, iters = 20, warmup = 5, repeats = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--models") models = value;
    else if (flag == "--threads") threads = std::atoi(value.c_str());
    else if (flag == "--iters") iters = std::atoi(value.c_str());
    else if (flag == "--warmup") warmup = std::atoi(value.c_str());
    else if (flag == "--repeats") repeats = std::atoi(value.c_str());
    else if (flag == "--source-dir") source_dir = value;
    else if (flag == "--device") device_name = value;
    else if (flag == "--precision") precision = value;
    else if (flag == "--batch") batch_override = std::atoll(value.c_str());
    else if (flag == "--blob-memory") blob_memory = value;
    else if (flag == "--recompute") recompute = value == "1" || value == "true" || value == "blocks";
    else if (flag == "--fuse") fuse = !(value == "0" || value == "false" || value == "off");
    else if (flag == "--channels-last") channels_last = value == "1" || value == "true" || value == "on";
    else {
      std::fprintf(stderr,
                   "unknown flag %s (flags: --models --threads --iters --warmup --repeats --source-dir --device "
                   "--precision --batch --blob-memory --recompute --fuse --channels-last)\n",
                   flag.c_str());
      return 2;
    }
  }
  try {
    set_num_threads(threads);
    const Device device = Device::parse(device_name);
    bench::use_device(device);
    const parallel::RankEnv env = parallel::detect_rank_env();
    std::unique_ptr<Communicator> comm;
    if (env.distributed()) comm = parallel::create_communicator(env, parallel::CommunicatorOptions{});
    const int world = env.world_size;
    std::stringstream list(models);
    std::string name;
    while (std::getline(list, name, ',')) {
      auto it = std::find_if(kModels.begin(), kModels.end(), [&](const BenchModel& m) { return m.name == name; });
      if (it == kModels.end()) {
        fail<ConfigError>("unknown benchmark model '", name, "' (mlp, lenet, cifar_vgg, vgg16, vit_b16, resnet50)");
      }
      const int64_t batch = batch_override > 0 ? batch_override : device.is_cpu() ? it->batch : it->gpu_batch;
      if (batch % world != 0) fail<ConfigError>("batch ", batch, " does not split over ", world, " ranks");
      const int64_t local_batch = batch / world;
      const std::string text =
          solver_text(source_dir, *it, local_batch, precision, blob_memory, recompute, fuse, channels_last);
      const SolverConfig config = parse_solver_config(parse_config_text(text, name), "");
      bench::reset_peak_memory(device);
      SolverOptions options;
      options.rank = env.rank;
      options.world_size = world;
      options.comm = comm.get();
      options.snapshots = SnapshotWriting::kDisabled;
      options.device = device;
      Solver solver(config, options);
      std::unique_ptr<parallel::DataParallel> dp;
      if (comm) dp = std::make_unique<parallel::DataParallel>(solver, *comm, parallel::DataParallelConfig{});
      Net& net = solver.net();
      Rng rng(1 + static_cast<uint64_t>(env.rank));
      // Synthetic inputs, made on the host and copied to the net's device once.
      bench::fill_gaussian(net.blob("data"), rng);
      Blob& label = net.blob("label");
      Tensor y(label.shape());
      for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] = static_cast<float>(rng.uniform_int(10));
      label.data.copy_from(y);
      // The training loop as `strata train` runs it: on a GPU each step's
      // results are read while the next one runs (and, from the second step,
      // the step replays as a CUDA graph).
      solver.run_steps(warmup);
      bench::wait_for(device);
      // The peak so far holds setup and the first steps (cuDNN's timing of
      // each shape among them); the steady peak is that of the timed steps.
      const bench::PeakMemory setup_peak = bench::peak_memory(device);
      bench::restart_peak_memory(device);
      if (dp) dp->take_comm_wait_seconds();
      std::vector<double> runs;
      double total_seconds = 0.0;
      for (int r = 0; r < repeats; ++r) {
        if (comm) comm->barrier();
        const auto t0 = std::chrono::steady_clock::now();
        solver.run_steps(iters);
        bench::wait_for(device);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        total_seconds += s;
        runs.push_back(static_cast<double>(batch) * iters / s);
      }
      const double comm_share = dp ? dp->take_comm_wait_seconds() / total_seconds : 0.0;
      if (env.rank != 0) continue;
      const bench::PeakMemory steady = bench::peak_memory(device);
      // The plan the start line of `strata train` prints, and the most tensor
      // storage this process has held (every model run so far in it).
      const MemoryReport plan = memory_report({&net, solver.test_net()});
      std::fprintf(stderr, "strata_bench_train: %s: planned %s; %s; tensor peak %s\n", name.c_str(),
                   plan.str().c_str(), net.blob_plan().str().c_str(), format_bytes(memory_peak()).c_str());
      if (!net.fusion_report().empty()) {
        std::fprintf(stderr, "strata_bench_train: %s: %s\n", name.c_str(), net.fusion_report().c_str());
      }
      std::printf("{\"impl\": \"strata\", \"model\": \"%s\", \"batch\": %lld, \"ranks\": %d, "
                  "\"threads\": %d, \"device\": \"%s\", \"precision\": \"%s\", \"peak_allocated_bytes\": %zu, "
                  "\"peak_reserved_bytes\": %zu, \"steady_peak_allocated_bytes\": %zu, \"planned_bytes\": %zu, "
                  "\"tensor_peak_bytes\": %zu, \"comm_wait_share\": %.3f, \"samples_per_s\": %.3f, \"runs\": [",
                  name.c_str(), static_cast<long long>(batch), world, num_threads(), device.str().c_str(),
                  precision.c_str(), std::max(setup_peak.allocated, steady.allocated),
                  std::max(setup_peak.reserved, steady.reserved), steady.allocated, plan.total(), memory_peak(),
                  comm_share, bench::median(runs));
      for (size_t r = 0; r < runs.size(); ++r) std::printf("%s%.3f", r ? ", " : "", runs[r]);
      std::printf("]}\n");
      std::fflush(stdout);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "strata_bench_train: %s\n", e.what());
    return 1;
  }
  return 0;
}
