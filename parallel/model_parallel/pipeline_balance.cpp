#include "parallel/model_parallel/pipeline_balance.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/memory_cap.h"
#include "framework/net.h"
#include "framework/config/net_spec.h"
#include "parallel/model_parallel/pipeline_plan.h"

namespace strata::parallel {

std::vector<LayerCost> costs_by_train_layer(const ConfigNode& net_root, const Net& net,
                                            const std::vector<double>& seconds) {
  STRATA_CHECK(static_cast<int>(seconds.size()) == net.num_layers(), seconds.size(), " times for ",
               net.num_layers(), " layers");
  const std::vector<std::string> names = train_layer_names(net_root);
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < names.size(); ++i) index[names[i]] = i;
  std::vector<LayerCost> costs(names.size());
  for (size_t i = 0; i < names.size(); ++i) costs[i].name = names[i];
  size_t owner = 0;  // Split layers count with the layer before them
  for (int i = 0; i < net.num_layers(); ++i) {
    auto it = index.find(net.layer(i).name());
    if (it != index.end()) owner = it->second;
    LayerCost& c = costs[owner];
    c.seconds += seconds[static_cast<size_t>(i)];
    for (const LayerParam& p : net.layer(i).params()) c.bytes += 2 * p.blob->data.nbytes();
    for (const Blob* top : net.tops(i)) c.bytes += 2 * top->data.nbytes();
  }
  return costs;
}

std::vector<double> declared_seconds(const Net& net) {
  constexpr double kFlopsPerSecond = 1e11, kBytesPerSecond = 1e10;
  std::vector<double> s(static_cast<size_t>(net.num_layers()), 0.0);
  for (int i = 0; i < net.num_layers(); ++i) {
    const ForwardCost c = net.layer(i).forward_cost(net.bottoms(i), net.tops(i));
    const double passes = net.layer_needs_backward(i) ? 3.0 : 1.0;  // backward: about twice forward
    s[static_cast<size_t>(i)] = passes * std::max(c.flops / kFlopsPerSecond, c.bytes / kBytesPerSecond);
  }
  return s;
}

std::vector<LayerCost> measure_layer_costs(const ConfigNode& net_root, const std::string& base_dir, int iterations) {
  NetOptions o;
  o.base_dir = base_dir;
  Net net(net_root, o);
  std::vector<double> seconds(static_cast<size_t>(net.num_layers()), 0.0);
  using Clock = std::chrono::steady_clock;
  for (int it = 0; it <= iterations; ++it) {  // iteration 0 warms up
    std::vector<double> t(seconds.size(), 0.0);
    for (int i = 0; i < net.num_layers(); ++i) {
      const auto s = Clock::now();
      net.forward(i, i);
      t[static_cast<size_t>(i)] += std::chrono::duration<double>(Clock::now() - s).count();
    }
    for (int i = net.num_layers() - 1; i >= 0; --i) {
      const auto s = Clock::now();
      net.backward(i, i);
      t[static_cast<size_t>(i)] += std::chrono::duration<double>(Clock::now() - s).count();
    }
    if (it == 0) continue;
    for (size_t k = 0; k < t.size(); ++k) seconds[k] += t[k] / iterations;
  }
  return costs_by_train_layer(net_root, net, seconds);
}

std::vector<LayerCost> model_layer_costs(const ConfigNode& net_root) {
  std::vector<LayerCost> costs;
  for (const ConfigNode& c : net_root.children()) {
    if (c.key() != "layer" || !layer_in_phase(c, Phase::kTrain)) continue;
    LayerCost lc;
    lc.name = c.get_string("name");
    // As the layer type declares it: the layers over weights, and the
    // normalisations (a pass over their input and its statistics each way),
    // weigh 20 times the rest.
    const LayerSchema schema = LayerRegistry::instance().find(c.get_string("type")).schema();
    const bool heavy = schema.work == LayerWork::kWeights || schema.kind == LayerKind::kNormalization;
    lc.seconds = heavy ? 1.0 : 0.05;
    costs.push_back(lc);
  }
  return costs;
}

std::vector<int> balance_stages(const std::vector<LayerCost>& costs, int stages) {
  const int n = static_cast<int>(costs.size());
  if (stages < 1 || stages > n) {
    fail<ConfigError>("cannot cut ", n, " layers into ", stages, " pipeline stages; use at most ", n, " stages");
  }
  std::vector<double> prefix(static_cast<size_t>(n) + 1, 0.0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[static_cast<size_t>(i)].seconds;
  const double inf = std::numeric_limits<double>::infinity();
  // best[k][i]: the slowest stage when layers [0, i) form k stages.
  std::vector<std::vector<double>> best(static_cast<size_t>(stages) + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int>> from(static_cast<size_t>(stages) + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0.0;
  for (int k = 1; k <= stages; ++k) {
    for (int i = k; i <= n; ++i) {
      for (int j = k - 1; j < i; ++j) {
        const double v = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (v < best[k][i]) {
          best[k][i] = v;
          from[k][i] = j;
        }
      }
    }
  }
  std::vector<int> stage(static_cast<size_t>(n), 0);
  int i = n;
  for (int k = stages; k >= 1; --k) {
    const int j = from[k][i];
    for (int l = j; l < i; ++l) stage[static_cast<size_t>(l)] = k - 1;
    i = j;
  }
  return stage;
}

std::string describe_balance(const std::vector<LayerCost>& costs, const std::vector<int>& stage_of_layer, int stages,
                             const std::string& label) {
  std::vector<double> t(static_cast<size_t>(stages), 0.0);
  std::vector<size_t> b(static_cast<size_t>(stages), 0);
  std::vector<std::string> first(static_cast<size_t>(stages)), last(static_cast<size_t>(stages));
  std::vector<int> count(static_cast<size_t>(stages), 0);
  double total = 0.0;
  for (size_t i = 0; i < costs.size(); ++i) {
    const size_t s = static_cast<size_t>(stage_of_layer[i]);
    t[s] += costs[i].seconds;
    b[s] += costs[i].bytes;
    total += costs[i].seconds;
    if (first[s].empty()) first[s] = costs[i].name;
    last[s] = costs[i].name;
    ++count[s];
  }
  std::ostringstream os;
  char buf[64];
  for (int s = 0; s < stages; ++s) {
    const size_t k = static_cast<size_t>(s);
    std::snprintf(buf, sizeof buf, "%.0f%%", total > 0 ? 100.0 * t[k] / total : 0.0);
    os << "  stage " << s << ": " << first[k] << " .. " << last[k] << " (" << count[k] << " layers) " << buf
       << " of the time, " << format_bytes(b[k]) << "\n";
  }
  const double slowest = *std::max_element(t.begin(), t.end());
  std::snprintf(buf, sizeof buf, "%.2f", total > 0 ? slowest / (total / stages) : 1.0);
  os << "  " << label << ": slowest stage / mean stage = " << buf << "\n";
  return os.str();
}

}  // namespace strata::parallel
