// Tensor-parallel blocks (docs/benchmarks.md): forward + backward throughput
// and per-rank memory of an MLP block and a vit_ti16 encoder block split over
// T ranks, against the unsplit block in one rank with 1 and with T threads.
// Ranks are threads of this process (one compute thread each) talking over
// TCP loopback, so T ranks use T cores like the T-thread baseline.
//   strata_bench_tensor_parallel [--iters 10] [--blocks mlp,vit]
// Each row times `iters` forward + backward passes after 2 warm-up passes;
// one run per row. Prints a Markdown table per block and the command that
// reproduces it.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "framework/communicator.h"
#include "framework/config/config.h"
#include "framework/error.h"
#include "framework/net.h"
#include "framework/cpu/threads.h"
#include "parallel/backends/tcp_communicator.h"
#include "parallel/rendezvous/store.h"
#include "parallel/transport/tcp_transport.h"

namespace {

using namespace strata;
using namespace std::chrono_literals;

struct Block {
  std::string key;   // for --blocks
  std::string name;
  std::string text;  // net config
  std::vector<int> tp_sizes;
};

Block mlp_block() {
  // A transformer-sized MLP: 1024 -> 4096 -> 1024, batch 64.
  return {"mlp", "MLP 1024-4096-1024, batch 64",
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
  // One vit_ti16 encoder block (D 192, 3 heads, MLP 768), 197 tokens, batch
  // 16; its 3 heads allow tp 3 only.
  return {"vit", "vit_ti16 block (197 tokens, D 192, 3 heads, MLP 768), batch 16",
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

struct Options {
  int iters = 10;
  std::string blocks = "mlp,vit";
};

const char* kUsage =
    "usage: strata_bench_tensor_parallel [--iters N] [--blocks mlp,vit]\n"
    "Times forward + backward of each block unsplit (1 and T threads) and split over T\n"
    "tensor-parallel ranks (threads of this process over TCP loopback).\n";

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) fail<ConfigError>(a, " needs a value\n", kUsage);
    const std::string v = argv[++i];
    if (a == "--iters") {
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 1 || n > 100000) {
        fail<ConfigError>("--iters: '", v, "' is not a count of iterations (1..100000)");
      }
      o.iters = static_cast<int>(n);
    } else if (a == "--blocks") {
      o.blocks = v;
    } else {
      fail<ConfigError>("unknown flag ", a, "\n", kUsage);
    }
  }
  return o;
}

std::vector<Block> chosen_blocks(const std::string& list) {
  std::vector<Block> out;
  std::stringstream in(list);
  std::string key;
  while (std::getline(in, key, ',')) {
    if (key == "mlp") out.push_back(mlp_block());
    else if (key == "vit") out.push_back(vit_block());
    else fail<ConfigError>("--blocks: unknown block '", key, "' (known: mlp, vit)");
  }
  return out;
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

// Seconds for `iters` forward + backward passes of net (after 2 warm-up
// passes); with a communicator, every rank starts and ends together.
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

// tp tcp communicators over loopback, one per rank, connected concurrently
// through an in-memory store.
std::vector<std::unique_ptr<Communicator>> connect_ranks(int tp) {
  auto store = parallel::make_memory_store(60s);
  std::vector<std::unique_ptr<parallel::Transport>> transports(static_cast<size_t>(tp));
  std::vector<std::string> errors(static_cast<size_t>(tp));
  std::vector<std::thread> threads;
  for (int r = 0; r < tp; ++r) {
    threads.emplace_back([&, r] {
      try {
        parallel::TcpTransportOptions opts;
        opts.advertise_host = "127.0.0.1";
        transports[static_cast<size_t>(r)] = parallel::connect_tcp_transport(*store, r, tp, "tpbench", 60s, opts);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    if (!e.empty()) fail<Error>("connecting ", tp, " tensor-parallel ranks over loopback: ", e);
  }
  std::vector<std::unique_ptr<Communicator>> comms;
  for (auto& t : transports) {
    comms.push_back(std::make_unique<parallel::TcpCommunicator>(std::move(t), parallel::TcpCommunicatorOptions{}));
  }
  return comms;
}

Measure run_split(const Block& b, int tp, int iters) {
  set_num_threads(1);
  const auto comms = connect_ranks(tp);
  Measure m;
  std::vector<std::string> errors(static_cast<size_t>(tp));
  std::vector<std::thread> threads;
  for (int r = 0; r < tp; ++r) {
    threads.emplace_back([&, r] {
      try {
        NetOptions o;
        o.comm = comms[static_cast<size_t>(r)].get();
        Net net(parse_config_text(b.text, "bench.prototxt"), o);
        const double s = time_passes(net, o.comm, iters);
        if (r == 0) {
          m.samples_per_s = static_cast<double>(batch_of(net) * iters) / s;
          m.memory = net.memory_report();
        }
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r].empty()) fail<Error>(b.key, " block, tp ", tp, ", rank ", r, ": ", errors[r]);
  }
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
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options opt = parse(argc, argv);
    const std::vector<Block> blocks = chosen_blocks(opt.blocks);
    std::printf("reproduce: strata_bench_tensor_parallel --iters %d --blocks %s\n", opt.iters, opt.blocks.c_str());
    for (const Block& b : blocks) {
      std::printf("\n%s, forward + backward, %d iterations\n\n", b.name.c_str(), opt.iters);
      std::printf("| run | samples/s | vs 1 thread | params MiB/rank | grads MiB/rank | activations MiB/rank |\n");
      std::printf("|---|---|---|---|---|---|\n");
      const Measure base = run_unsplit(b, 1, opt.iters);
      print_row("unsplit, 1 rank x 1 thread", base, base);
      for (int tp : b.tp_sizes) {
        const std::string t = std::to_string(tp);
        print_row("unsplit, 1 rank x " + t + " threads", run_unsplit(b, tp, opt.iters), base);
        print_row("tp " + t + ", " + t + " ranks x 1 thread", run_split(b, tp, opt.iters), base);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata_bench_tensor_parallel: %s\n", e.what());
    return 1;
  }
  return 0;
}
