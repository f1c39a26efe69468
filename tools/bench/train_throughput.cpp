// Training throughput of strata (forward + backward + SGD update, float32) on
// the models in models/, with synthetic inputs, for comparison with
// tools/bench/torch_train_throughput.py. tools/bench/run_train_bench.py runs
// the two alternately and prints the table recorded in docs/benchmarks.md.
//
//   strata_bench_train --models mlp,lenet,cifar_vgg --threads 2 --iters 20 --repeats 5
//
// Prints one JSON object per model: {"impl":"strata","model":...,"samples_per_s":median,...}.
//
// Under `strata launch --nproc N` it trains data-parallel: each rank gets
// batch/N samples (the global batch stays the model's), gradients are
// averaged over tcp, and rank 0 reports the global samples/s and the share of
// step time spent waiting for communication.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "framework/config.h"
#include "framework/error.h"
#include "framework/rng.h"
#include "framework/solver.h"
#include "framework/threads.h"
#include "parallel/communicator_factory.h"
#include "parallel/data_parallel.h"
#include "parallel/env.h"

namespace {

using namespace strata;

struct BenchModel {
  std::string name;
  Shape input;  // per sample
  int64_t batch;
};

const std::vector<BenchModel> kModels = {
    {"mlp", {1, 28, 28}, 128}, {"lenet", {1, 28, 28}, 64}, {"cifar_vgg", {3, 32, 32}, 32}};

// The model's TRAIN net with its data layer replaced by an Input layer of the
// benchmark's shape, wrapped in an SGD solver config (momentum 0.9, weight
// decay 5e-4: the PyTorch script's settings).
std::string solver_text(const std::string& source_dir, const BenchModel& m, int64_t batch) {
  const ConfigNode root = parse_config_file(source_dir + "/models/" + m.name + "/train.prototxt");
  std::ostringstream net;
  net << "name: \"" << m.name << "\"\n";
  net << "layer { name: \"input\" type: \"Input\" top: \"data\" top: \"label\" input_param { shape { dim: "
      << batch;
  for (int64_t d : m.input) net << " dim: " << d;
  net << " } shape { dim: " << batch << " } } }\n";
  for (const ConfigNode* layer : root.all("layer")) {
    const std::string type = layer->get_string("type");
    if (type.size() >= 4 && type.compare(type.size() - 4, 4, "Data") == 0) continue;
    if (layer->has("include")) continue;  // TEST-only layers (Accuracy)
    net << layer->to_string() << "\n";
  }
  std::ostringstream solver;
  solver << "net_param {\n" << net.str() << "}\n"
         << "base_lr: 0.01 momentum: 0.9 weight_decay: 0.0005 max_iter: 1000000 display: 0\n"
         << "test_interval: 0 snapshot: 0 snapshot_after_train: false\n";
  return solver.str();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string models = "mlp,lenet,cifar_vgg";
  std::string source_dir = STRATA_SOURCE_DIR;
  int threads = 2, iters = 20, warmup = 5, repeats = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--models") models = value;
    else if (flag == "--threads") threads = std::atoi(value.c_str());
    else if (flag == "--iters") iters = std::atoi(value.c_str());
    else if (flag == "--warmup") warmup = std::atoi(value.c_str());
    else if (flag == "--repeats") repeats = std::atoi(value.c_str());
    else if (flag == "--source-dir") source_dir = value;
    else {
      std::fprintf(stderr, "unknown flag %s (flags: --models --threads --iters --warmup --repeats --source-dir)\n",
                   flag.c_str());
      return 2;
    }
  }
  try {
    set_num_threads(threads);
    const parallel::RankEnv env = parallel::detect_rank_env();
    std::unique_ptr<Communicator> comm;
    if (env.distributed()) comm = parallel::create_communicator(env, parallel::CommunicatorOptions{});
    const int world = env.world_size;
    std::stringstream list(models);
    std::string name;
    while (std::getline(list, name, ',')) {
      auto it = std::find_if(kModels.begin(), kModels.end(), [&](const BenchModel& m) { return m.name == name; });
      if (it == kModels.end()) fail<ConfigError>("unknown benchmark model '", name, "' (mlp, lenet, cifar_vgg)");
      if (it->batch % world != 0) fail<ConfigError>("batch ", it->batch, " does not split over ", world, " ranks");
      const int64_t local_batch = it->batch / world;
      const SolverConfig config =
          parse_solver_config(parse_config_text(solver_text(source_dir, *it, local_batch), name), "");
      SolverOptions options;
      options.rank = env.rank;
      options.world_size = world;
      options.comm = comm.get();
      options.snapshots = SnapshotWriting::kDisabled;
      Solver solver(config, options);
      std::unique_ptr<parallel::DataParallel> dp;
      if (comm) dp = std::make_unique<parallel::DataParallel>(solver, *comm, parallel::DataParallelConfig{});
      Net& net = solver.net();
      Rng rng(1 + static_cast<uint64_t>(env.rank));
      Blob& data = net.blob("data");
      float* x = data.data.data<float>();
      for (int64_t i = 0; i < data.numel(); ++i) x[i] = rng.gaussian(0.0f, 1.0f);
      Blob& label = net.blob("label");
      float* y = label.data.data<float>();
      for (int64_t i = 0; i < label.numel(); ++i) y[i] = static_cast<float>(rng.uniform_int(10));

      for (int i = 0; i < warmup; ++i) solver.step();
      if (dp) dp->take_comm_wait_seconds();
      std::vector<double> runs;
      double total_seconds = 0.0;
      for (int r = 0; r < repeats; ++r) {
        if (comm) comm->barrier();
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) solver.step();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        total_seconds += s;
        runs.push_back(static_cast<double>(it->batch) * iters / s);
      }
      const double comm_share = dp ? dp->take_comm_wait_seconds() / total_seconds : 0.0;
      if (env.rank != 0) continue;
      std::printf("{\"impl\": \"strata\", \"model\": \"%s\", \"batch\": %lld, \"ranks\": %d, "
                  "\"threads\": %d, \"comm_wait_share\": %.3f, \"samples_per_s\": %.3f, \"runs\": [",
                  name.c_str(), static_cast<long long>(it->batch), world, num_threads(), comm_share,
                  median(runs));
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
