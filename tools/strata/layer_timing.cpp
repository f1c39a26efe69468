#include "tools/strata/layer_timing.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <map>
#include <utility>

#include "framework/error.h"
#include "framework/io/file_util.h"
#include "framework/io/json.h"
#include "framework/solver/optimizer.h"
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

// The backward passes, last layer first, as [from, to] runs: one layer
// each, but a recompute range whole (its backward recomputes its forward
// first and cannot run over part of it), charged to its last layer.
std::vector<std::pair<int, int>> backward_units(const Net& net) {
  std::vector<int> first_of(static_cast<size_t>(net.num_layers()), -1);
  for (const RecomputeRange& r : net.recompute_ranges()) first_of[static_cast<size_t>(r.last)] = r.first;
  std::vector<std::pair<int, int>> units;
  for (int i = net.num_layers() - 1; i >= 0; --i) {
    const int from = first_of[static_cast<size_t>(i)] >= 0 ? first_of[static_cast<size_t>(i)] : i;
    units.emplace_back(from, i);
    i = from;
  }
  return units;
}

}  // namespace

LayerTimes measure_layer_times(Net& net, int iterations) {
  const int n = net.num_layers();
  net.forward_backward();  // warm-up: first-touch allocations, caches
  LayerTimes t;
  t.forward_ms.assign(n, 0.0);
  t.backward_ms.assign(n, 0.0);
  const std::vector<std::pair<int, int>> units = backward_units(net);
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
      for (const auto& [from, to] : units) {
        b_timers[to].start();
        net.backward(from, to);
        b_timers[to].stop();
      }
      net.zero_param_diffs();
      whole.stop();
      total += whole.elapsed_ms();
      for (int i = 0; i < n; ++i) t.forward_ms[i] += f_timers[i].elapsed_ms();
      for (const auto& unit : units) t.backward_ms[unit.second] += b_timers[unit.second].elapsed_ms();
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
    for (const auto& [from, to] : units) {
      const double t0 = now_ms();
      net.backward(from, to);
      t.backward_ms[to] += now_ms() - t0;
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
  for (const RecomputeRange& r : net.recompute_ranges()) {
    t.note += "; the recompute range '" + net.layer(r.first).name() + "' to '" + net.layer(r.last).name() +
              "' runs its backward whole (its forward again first), its time on '" + net.layer(r.last).name() + "'";
  }
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
    for (const Blob* top : net.tops(i)) {
      const BlobVec& bottoms = net.bottoms(i);
      if (std::find(bottoms.begin(), bottoms.end(), top) == bottoms.end()) {
        l.activation_bytes += static_cast<double>(top->numel()) * sizeof(float);
      }
    }
    l.split = split_of(layer);
    p.layers.push_back(l);
  }
  // A gradient is final after the lowest layer whose backward writes it
  // (assign_buckets in parallel/data_parallel/data_parallel.cpp uses the same).
  for (const NetParam& param : net.params()) {
    if (param.owner_layer >= 0) {
      p.layers.at(param.owner_layer).param_bytes += static_cast<double>(param.blob->numel()) * sizeof(float);
    }
    if (!is_updated(param) || param.last_backward_layer < 0) continue;
    p.layers.at(param.last_backward_layer).grad_bytes += static_cast<double>(param.blob->numel()) * sizeof(float);
  }
  if (n > 0 && !net.tops(0).empty() && net.tops(0)[0]->shape().size() > 0) {
    p.batch = static_cast<int>(net.tops(0)[0]->shape()[0]);
  }
  // What the net's plan holds for the outputs and their gradients (values,
  // gradients, what layers keep, scratch placed by step) per byte of the
  // outputs: the estimate's activations for one worker are then the number
  // the start line prints.
  double created = 0.0;
  for (const estimate::LayerProfile& l : p.layers) created += l.activation_bytes;
  if (created > 0) p.activation_scale = static_cast<double>(net.memory_report().activation_bytes) / created;
  return p;
}

namespace {

struct TraceEvent {
  std::string cat, name;
  double ts, dur, pid, tid;
};

struct Span {
  double ts, end;
};

// The complete ("X") events of a `strata train --timeline` trace.
std::vector<TraceEvent> read_trace_events(const std::string& path) {
  JsonValue trace;
  try {
    trace = parse_json(read_file_bytes(path));
  } catch (const JsonError& e) {
    fail<IoError>(path, ": not a Chrome trace from strata train --timeline: ", e.what());
  }
  const JsonValue* events = trace.is_object() ? trace.find("traceEvents") : nullptr;
  if (!events || !events->is_array()) fail<IoError>(path, ": no traceEvents array; write one with strata train --timeline");
  std::vector<TraceEvent> all;
  for (const JsonValue& e : events->as_array()) {
    const JsonValue* ph = e.find("ph");
    if (!ph || !ph->is_string() || ph->as_string() != "X") continue;
    const JsonValue *cat = e.find("cat"), *name = e.find("name"), *ts = e.find("ts"), *dur = e.find("dur"),
                    *pid = e.find("pid"), *tid = e.find("tid");
    if (!cat || !name || !ts || !dur || !pid || !tid || !ts->is_number() || !dur->is_number()) continue;
    all.push_back({cat->as_string(), name->as_string(), ts->as_number(), dur->as_number(), pid->as_number(),
                   tid->as_number()});
  }
  return all;
}

// Rank 0's steps (the lowest pid that has steps), sorted, and the thread that ran them.
std::vector<Span> rank0_steps(const std::vector<TraceEvent>& all, const std::string& path, double* pid0,
                              double* tid0) {
  std::vector<Span> steps;
  *pid0 = 1e300;
  *tid0 = 0;
  for (const TraceEvent& e : all) {
    if (e.cat == "step" && e.pid < *pid0) *pid0 = e.pid;
  }
  for (const TraceEvent& e : all) {
    if (e.cat == "step" && e.pid == *pid0) {
      steps.push_back({e.ts, e.ts + e.dur});
      *tid0 = e.tid;
    }
  }
  if (steps.empty()) fail<IoError>(path, ": the trace holds no training step");
  std::sort(steps.begin(), steps.end(), [](const Span& a, const Span& b) { return a.ts < b.ts; });
  return steps;
}

// The step an event [ts, ts + dur] lies in, or nullptr (outside every step: a test, a snapshot).
const Span* step_of(const std::vector<Span>& steps, double ts, double dur) {
  auto it = std::upper_bound(steps.begin(), steps.end(), ts, [](double v, const Span& s) { return v < s.ts; });
  if (it == steps.begin() || ts + dur > std::prev(it)->end + 1) return nullptr;
  return &*std::prev(it);
}

}  // namespace

LayerTimes layer_times_from_trace(const std::string& path, const Net& net) {
  const std::vector<TraceEvent> all = read_trace_events(path);
  double pid0 = 0, tid0 = 0;
  const std::vector<Span> steps = rank0_steps(all, path, &pid0, &tid0);
  LayerTimes t;
  t.forward_ms.assign(static_cast<size_t>(net.num_layers()), 0.0);
  t.backward_ms.assign(static_cast<size_t>(net.num_layers()), 0.0);
  std::map<std::string, int> index;
  for (int i = 0; i < net.num_layers(); ++i) index[net.layer(i).name()] = i;
  // A GPU run's host events time the launches; its GPU spans (CUDA events,
  // framework/cuda/device_timeline.h) time the work, and only the training
  // net's are "gpu forward" (a test's are "gpu test").
  const bool gpu = std::any_of(all.begin(), all.end(),
                               [&](const TraceEvent& e) { return e.pid == pid0 && e.cat == "gpu forward"; });
  const std::string forward = gpu ? "gpu forward" : "forward", backward = gpu ? "gpu backward" : "backward";
  size_t matched = 0;
  for (const TraceEvent& e : all) {
    if (e.pid != pid0 || (e.cat != forward && e.cat != backward)) continue;
    if (!gpu && (e.tid != tid0 || !step_of(steps, e.ts, e.dur))) continue;  // outside a step: a test
    const auto found = index.find(e.name);
    if (found == index.end()) continue;
    const int i = found->second;
    (e.cat == forward ? t.forward_ms : t.backward_ms)[static_cast<size_t>(i)] += e.dur / 1000.0;
    ++matched;
  }
  if (matched == 0) {
    fail<IoError>(path, ": no forward or backward event in its steps names a layer of net '", net.name(),
                  "'; was the trace written by a run of this net?");
  }
  const double n = static_cast<double>(steps.size());
  for (double& v : t.forward_ms) v /= n;
  for (double& v : t.backward_ms) v /= n;
  for (size_t i = 0; i < t.forward_ms.size(); ++i) t.step_ms += t.forward_ms[i] + t.backward_ms[i];
  t.note = "from the timeline " + path + ", rank 0, " + std::to_string(steps.size()) + " steps" +
           (gpu ? ", GPU spans (CUDA events)" : "");
  return t;
}

TraceCommunication communication_from_trace(const std::string& path) {
  const std::vector<TraceEvent> all = read_trace_events(path);
  double pid0 = 0, tid0 = 0;
  const std::vector<Span> steps = rank0_steps(all, path, &pid0, &tid0);
  TraceCommunication c;
  c.steps = static_cast<int>(steps.size());
  std::vector<double> ranks;
  for (const TraceEvent& e : all) {
    if (e.cat == "step" && std::find(ranks.begin(), ranks.end(), e.pid) == ranks.end()) ranks.push_back(e.pid);
  }
  c.ranks = static_cast<int>(ranks.size());
  // Per step: the wire's busy time is the union of the bucket spans (a bucket
  // is launched while an earlier one may still run); the exposed time is the
  // step's wait for them.
  std::map<const Span*, std::vector<Span>> busy;
  double buckets = 0;
  for (const TraceEvent& e : all) {
    if (e.pid != pid0) continue;
    const Span* step = step_of(steps, e.ts, e.dur);
    if (!step) continue;
    if (e.cat == "allreduce") {
      busy[step].push_back({e.ts, e.ts + e.dur});
      if (e.name == "allreduce (all buckets)") {
        c.overlapped = false;
        c.exposed_ms += e.dur / 1000.0;  // after backward, on the step's own thread
      }
      ++buckets;
    } else if (e.cat == "wait" && e.name == "wait allreduce") {
      c.exposed_ms += e.dur / 1000.0;
    }
  }
  for (auto& [step, spans] : busy) {
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.ts < b.ts; });
    double end = -1e300;
    for (const Span& s : spans) {
      const double from = std::max(s.ts, end);
      if (s.end > from) c.busy_ms += (s.end - from) / 1000.0;
      end = std::max(end, s.end);
    }
  }
  for (const Span& s : steps) c.step_ms += (s.end - s.ts) / 1000.0;
  const double n = static_cast<double>(steps.size());
  c.busy_ms /= n;
  c.exposed_ms /= n;
  c.step_ms /= n;
  c.buckets_per_step = buckets / n;
  return c;
}

}  // namespace strata::cli
