// Tensor-parallel benchmark (docs/benchmarks.md): forward + backward
// throughput and per-rank memory of an MLP block and a vit_ti16 encoder
// block split over T ranks, against the unsplit block in one rank with 1 and
// with T threads. Ranks are threads of this process (one compute thread
// each) talking over TCP loopback, so T ranks use T cores like the T-thread
// baseline. Disabled in the normal suite; run it with
//   strata_tests --gtest_also_run_disabled_tests --gtest_filter='*TensorParallelBench*'
// (STRATA_TP_BENCH_ITERS sets the timed iterations, default 10).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "framework/communicator.h"
#include "framework/config.h"
#include "framework/net.h"
#include "framework/threads.h"
#include "parallel/backends/tcp_communicator.h"
#include "tests/parallel_test_util.h"

namespace strata::parallel {
namespace {

using namespace std::chrono_literals;

struct Block {
  std::string name;
  std::string text;  // net config
  std::vector<int> tp_sizes;
};

Block mlp_block() {
  // A transformer-sized MLP: 1024 -> 4096 -> 1024, batch 64.
  return {"MLP 1024-4096-1024, batch 64",
          "name: 'mlp'\n"
          "layer { name: 'in' type: 'Input' top: 'data' top: 'label'\n"
          "  input_param { shape { dim: 64 dim: 1024 } shape { dim: 64 } } }\n"
          "layer { name: 'fc1' type: 'InnerProduct' bottom: 'data' top: 'fc1'\n"
          "  inner_product_param { num_output: 4096 split: COLUMN } }\n"
          "layer { name: 'relu' type: 'ReLU' bottom: 'fc1' top: 'fc1' }\n"
          "layer { name: 'fc2' type: 'InnerProduct' bottom: 'fc1' top: 'fc2'\n"
          "  inner_product_param { num_output: 1024 split: ROW } }\n"
          "layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'fc2' bottom: 'label' top: 'loss' }\n",
          {2, 4}};
}

Block vit_block() {
  // One vit_ti16 encoder block (D 192, 3 heads, MLP 768, 197 tokens), batch 16.
  return {"vit_ti16 block (197 tokens, D 192, 3 heads, MLP 768), batch 16",
          "name: 'vit_block'\n"
          "layer { name: 'in' type: 'Input' top: 'data' top: 'label'\n"
          "  input_param { shape { dim: 16 dim: 197 dim: 192 } shape { dim: 16 } } }\n"
          "layer { name: 'ln1' type: 'LayerNorm' bottom: 'data' top: 'ln1' layer_norm_param { eps: 1e-6 } }\n"
          "layer { name: 'attn' type: 'MultiHeadAttention' bottom: 'ln1' top: 'attn'\n"
          "  attention_param { num_heads: 3 split: HEADS } }\n"
          "layer { name: 'add1' type: 'Eltwise' bottom: 'data' bottom: 'attn' top: 'add1' }\n"
          "layer { name: 'ln2' type: 'LayerNorm' bottom: 'add1' top: 'ln2' layer_norm_param { eps: 1e-6 } }\n"
          "layer { name: 'fc1' type: 'InnerProduct' bottom: 'ln2' top: 'fc1'\n"
          "  inner_product_param { num_output: 768 axis: 2 split: COLUMN } }\n"
          "layer { name: 'gelu' type: 'GELU' bottom: 'fc1' top: 'fc1' }\n"
          "layer { name: 'fc2' type: 'InnerProduct' bottom: 'fc1' top: 'fc2'\n"
          "  inner_product_param { num_output: 192 axis: 2 split: ROW } }\n"
          "layer { name: 'add2' type: 'Eltwise' bottom: 'add1' bottom: 'fc2' top: 'add2' }\n"
          "layer { name: 'pool' type: 'InnerProduct' bottom: 'add2' top: 'pool'\n"
          "  inner_product_param { num_output: 10 } }\n"
          "layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'pool' bottom: 'label' top: 'loss' }\n",
          {3}};
}

struct Measure {
  double samples_per_s = 0.0;
  MemoryReport memory;  // rank 0's
};

void fill_inputs(Net& net) {
  std::mt19937 gen(1);
  std::normal_distribution<float> normal;
  Blob& x = net.blob("data");
  for (int64_t i = 0; i < x.numel(); ++i) x.data.data<float>()[i] = normal(gen);
  Blob& y = net.blob("label");
  for (int64_t i = 0; i < y.numel(); ++i) y.data.data<float>()[i] = 0.0f;
}

// Times `iters` forward + backward passes of net on every rank (after 2
// warm-up passes); `comm` may be null (one rank).
double time_passes(Net& net, Communicator* comm, int iters) {
  fill_inputs(net);
  for (int i = 0; i < 2; ++i) net.forward_backward();
  if (comm) comm->barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) net.forward_backward();
  if (comm) comm->barrier();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int64_t batch_of(Net& net) { return net.blob("data").shape()[0]; }

Measure run_unsplit(const Block& b, int threads, int iters) {
  set_num_threads(threads);
  Net net(parse_config_text(b.text, "bench.prototxt"), NetOptions{});
  Measure m;
  m.samples_per_s = static_cast<double>(batch_of(net) * iters) / time_passes(net, nullptr, iters);
  m.memory = net.memory_report();
  return m;
}

Measure run_split(const Block& b, int tp, int iters) {
  set_num_threads(1);
  auto transports = parallel_test::connect_world(tp, 60s, "tpbench");
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < tp; ++r) {
    comms.push_back(std::make_unique<TcpCommunicator>(std::move(transports[static_cast<size_t>(r)]),
                                                      TcpCommunicatorOptions{}));
  }
  Measure m;
  const auto errors = parallel_test::run_ranks(tp, [&](int rank) {
    NetOptions o;
    o.comm = comms[static_cast<size_t>(rank)].get();
    Net net(parse_config_text(b.text, "bench.prototxt"), o);
    const double s = time_passes(net, o.comm, iters);
    if (rank == 0) {
      m.samples_per_s = static_cast<double>(batch_of(net) * iters) / s;
      m.memory = net.memory_report();
    }
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  return m;
}

std::string mib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

void print_row(const std::string& what, const Measure& m, const Measure& base) {
  std::printf("| %s | %.1f | %.2fx | %s | %s | %s |\n", what.c_str(), m.samples_per_s,
              m.samples_per_s / base.samples_per_s, mib(m.memory.param_bytes).c_str(),
              mib(m.memory.grad_bytes).c_str(), mib(m.memory.activation_bytes).c_str());
}

TEST(TensorParallelBench, DISABLED_ThroughputAndMemory) {
  const char* env = std::getenv("STRATA_TP_BENCH_ITERS");
  const int iters = env ? std::max(1, std::atoi(env)) : 10;
  for (const Block& b : {mlp_block(), vit_block()}) {
    std::printf("\n%s, forward + backward, %d iterations\n\n", b.name.c_str(), iters);
    std::printf("| run | samples/s | vs 1 thread | params MiB/rank | grads MiB/rank | activations MiB/rank |\n");
    std::printf("|---|---|---|---|---|---|\n");
    const Measure base = run_unsplit(b, 1, iters);
    print_row("unsplit, 1 rank x 1 thread", base, base);
    for (int tp : b.tp_sizes) {
      print_row("unsplit, 1 rank x " + std::to_string(tp) + " threads", run_unsplit(b, tp, iters), base);
      print_row("tp " + std::to_string(tp) + ", " + std::to_string(tp) + " ranks x 1 thread", run_split(b, tp, iters),
                base);
    }
    std::fflush(stdout);
  }
  set_num_threads(0);
}

}  // namespace
}  // namespace strata::parallel
