#include "tools/strata/layer_timing.h"

#include <chrono>

#include "framework/optimizer.h"
#ifdef STRATA_WITH_CUDA
#include "framework/cuda/device_api.h"
#include "framework/cuda/streams.h"
#endif

namespace strata::cli {

namespace {

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

double blob_bytes(const BlobVec& blobs) {
  double bytes = 0;
  for (const Blob* b : blobs) bytes += static_cast<double>(b->numel()) * sizeof(float);
  return bytes;
}

// The value of a `split` key in any of the layer's blocks
// (inner_product_param, attention_param, convolution_param), "" for none.
std::string split_of(const Layer& layer) {
  for (const ConfigNode& block : layer.spec().node.children()) {
    if (!block.is_block()) continue;
    if (const ConfigNode* split = block.find("split")) {
      const std::string value = split->as_string();
      return value == "NONE" ? "" : value;
    }
  }
  return "";
}

}  // namespace

LayerTimes measure_layer_times(Net& net, int iterations) {
  const int n = net.num_layers();
  net.forward_backward();  // warm-up: first-touch allocations, caches
  LayerTimes t;
  t.forward_ms.assign(n, 0.0);
  t.backward_ms.assign(n, 0.0);
  double total = 0.0;
#ifdef STRATA_WITH_CUDA
  if (!net.device().is_cpu()) {
    // Each layer between two events on the compute stream: GPU time, not
    // launch time. One synchronisation per iteration reads them all.
    const int dev = net.device().index;
    cuda::synchronize(dev);
    std::vector<cuda::EventTimer> f_timers(n), b_timers(n);
    cuda::EventTimer whole;
    for (int it = 0; it < iterations; ++it) {
      whole.start();
      for (int i = 0; i < n; ++i) {
        f_timers[i].start();
        net.forward(i, i);
        f_timers[i].stop();
      }
      for (int i = n - 1; i >= 0; --i) {
        b_timers[i].start();
        net.backward(i, i);
        b_timers[i].stop();
      }
      net.zero_param_diffs();
      whole.stop();
      total += whole.elapsed_ms();
      for (int i = 0; i < n; ++i) {
        t.forward_ms[i] += f_timers[i].elapsed_ms();
        t.backward_ms[i] += b_timers[i].elapsed_ms();
      }
    }
    t.note = "GPU times from CUDA events on " + net.device().str() + "; " + cuda::memory_report(dev);
  }
#endif
  for (int it = 0; it < iterations && net.device().is_cpu(); ++it) {
    const double start = now_ms();
    for (int i = 0; i < n; ++i) {
      const double t0 = now_ms();
      net.forward(i, i);
      t.forward_ms[i] += now_ms() - t0;
    }
    for (int i = n - 1; i >= 0; --i) {
      const double t0 = now_ms();
      net.backward(i, i);
      t.backward_ms[i] += now_ms() - t0;
    }
    net.zero_param_diffs();
    total += now_ms() - start;
  }
  for (int i = 0; i < n; ++i) {
    t.forward_ms[i] /= iterations;
    t.backward_ms[i] = net.layer_needs_backward(i) ? t.backward_ms[i] / iterations : 0.0;
  }
  t.step_ms = total / iterations;
  if (t.note.empty()) t.note = "CPU wall times";
  return t;
}

estimate::StepProfile step_profile(const Net& net, const LayerTimes& times) {
  estimate::StepProfile p;
  p.net = net.name();
  const int n = net.num_layers();
  for (int i = 0; i < n; ++i) {
    const Layer& layer = net.layer(i);
    estimate::LayerProfile l;
    l.name = layer.name();
    l.type = layer.type();
    l.forward = times.forward_ms.at(i) / 1e3;
    l.backward = times.backward_ms.at(i) / 1e3;
    l.top_bytes = blob_bytes(net.tops(i));
    l.bottom_bytes = blob_bytes(net.bottoms(i));
    l.split = split_of(layer);
    p.layers.push_back(l);
  }
  // A gradient is final after the lowest layer whose backward writes it
  // (assign_buckets in parallel/data_parallel/data_parallel.cpp uses the same).
  for (const NetParam& param : net.params()) {
    if (!is_updated(param) || param.last_backward_layer < 0) continue;
    p.layers.at(param.last_backward_layer).grad_bytes += static_cast<double>(param.blob->numel()) * sizeof(float);
  }
  if (n > 0 && !net.tops(0).empty() && net.tops(0)[0]->shape().size() > 0) {
    p.batch = static_cast<int>(net.tops(0)[0]->shape()[0]);
  }
  return p;
}

}  // namespace strata::cli
