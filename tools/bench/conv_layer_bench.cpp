// Per-layer convolution timing on the CPU, for comparison with
// tools/bench/torch_conv_layers.py (the same shapes in PyTorch). On a machine
// shared with other work the whole-model benchmark swings by tens of percent;
// a single layer's forward, input-gradient-and-weight-gradient backward, timed
// many times, and its minimum (and the minimum of process CPU time) are what
// development decisions here are based on.
//
//   strata_bench_conv --threads 2 --batch 32 --reps 20
//   strata_bench_conv --layers 64x16x16:128:3:1:1 --threads 1
//
// A layer is CxHxW:num_output:kernel:pad:stride (defaults: the convolutions of
// models/cifar_vgg). Prints one JSON object per layer: forward and backward
// milliseconds (min and median of wall time, min of process CPU time).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <sstream>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/error.h"
#include "framework/layer.h"
#include "framework/layer_registry.h"
#include "framework/rng.h"
#include "framework/cpu/threads.h"

namespace {

using namespace strata;

struct ConvShape {
  int64_t c, h, w, out, k, pad, stride;
};

const char* kCifarVgg = "3x32x32:64:3:1:1,64x32x32:64:3:1:1,64x16x16:128:3:1:1,128x16x16:128:3:1:1,"
                        "128x8x8:256:3:1:1,256x8x8:256:3:1:1";

ConvShape parse_shape(const std::string& s) {
  ConvShape c{};
  if (std::sscanf(s.c_str(), "%ldx%ldx%ld:%ld:%ld:%ld:%ld", &c.c, &c.h, &c.w, &c.out, &c.k, &c.pad, &c.stride) != 7) {
    fail<ConfigError>("--layers: '", s, "' is not CxHxW:num_output:kernel:pad:stride (e.g. 64x16x16:128:3:1:1)");
  }
  return c;
}

double wall_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

struct Times {
  std::vector<double> wall, cpu;
  void add(double w, double c) {
    wall.push_back(w);
    cpu.push_back(c);
  }
  static double min(std::vector<double> v) { return *std::min_element(v.begin(), v.end()); }
  static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
};

template <typename F>
void timed(Times& t, const F& f) {
  const double w0 = wall_ms(), c0 = cpu_ms();
  f();
  t.add(wall_ms() - w0, cpu_ms() - c0);
}

void bench(const ConvShape& s, int64_t batch, int reps) {
  std::ostringstream cfg;
  cfg << "layer { name: \"conv\" type: \"Convolution\" convolution_param { num_output: " << s.out
      << " kernel_size: " << s.k << " pad: " << s.pad << " stride: " << s.stride << " } }";
  LayerSpec spec;
  spec.name = "conv";
  spec.type = "Convolution";
  spec.node = parse_config_text(cfg.str(), "<bench>").children().at(0);
  spec.bottoms = {"x"};
  spec.tops = {"y"};
  const std::unique_ptr<Layer> layer = LayerRegistry::instance().find("Convolution").create(spec, LayerContext{});
  Blob x(Shape{batch, s.c, s.h, s.w});
  Blob y;
  Rng rng(3);
  for (int64_t i = 0; i < x.numel(); ++i) x.data.data<float>()[i] = rng.gaussian(0.0f, 1.0f);
  layer->setup({&x}, {&y});
  layer->reshape({&x}, {&y});
  for (int64_t i = 0; i < y.numel(); ++i) y.diff.data<float>()[i] = rng.gaussian(0.0f, 1.0f);
  for (int r = 0; r < 2; ++r) {  // warm-up: first-touch allocations, caches
    layer->forward_cpu({&x}, {&y});
    layer->backward_cpu({&y}, {true}, {&x});
  }
  Times fwd, bwd;
  for (int r = 0; r < reps; ++r) {
    timed(fwd, [&] { layer->forward_cpu({&x}, {&y}); });
    timed(bwd, [&] { layer->backward_cpu({&y}, {true}, {&x}); });
  }
  const double flop = 2.0 * batch * s.out * (s.c * s.k * s.k) *
                      static_cast<double>(((s.h + 2 * s.pad - s.k) / s.stride + 1) * ((s.w + 2 * s.pad - s.k) / s.stride + 1));
  std::printf("{\"impl\": \"strata\", \"layer\": \"%ldx%ldx%ld:%ld:%ld:%ld:%ld\", \"batch\": %ld, \"threads\": %d, "
              "\"fwd_ms_min\": %.3f, \"fwd_ms_median\": %.3f, \"fwd_cpu_ms_min\": %.3f, "
              "\"bwd_ms_min\": %.3f, \"bwd_ms_median\": %.3f, \"bwd_cpu_ms_min\": %.3f, \"fwd_gflops_max\": %.1f, "
              "\"bwd_gflops_max\": %.1f}\n",
              s.c, s.h, s.w, s.out, s.k, s.pad, s.stride, batch, num_threads(), Times::min(fwd.wall),
              Times::median(fwd.wall), Times::min(fwd.cpu), Times::min(bwd.wall), Times::median(bwd.wall),
              Times::min(bwd.cpu), flop / Times::min(fwd.wall) * 1e-6, 2 * flop / Times::min(bwd.wall) * 1e-6);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string layers = kCifarVgg;
  int threads = 2, reps = 20;
  int64_t batch = 32;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--layers") layers = value;
    else if (flag == "--threads") threads = std::atoi(value.c_str());
    else if (flag == "--batch") batch = std::atoll(value.c_str());
    else if (flag == "--reps") reps = std::atoi(value.c_str());
    else {
      std::fprintf(stderr, "unknown flag %s (flags: --layers --threads --batch --reps)\n", flag.c_str());
      return 2;
    }
  }
  try {
    set_num_threads(threads);
    std::stringstream list(layers);
    std::string item;
    while (std::getline(list, item, ',')) bench(parse_shape(item), batch, reps < 1 ? 1 : reps);
  } catch (const Error& e) {
    std::fprintf(stderr, "strata_bench_conv: %s\n", e.what());
    return 1;
  }
  return 0;
}
