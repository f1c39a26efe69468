#include "parallel/estimate/strategies.h"

#include <algorithm>
#include <sstream>

#include "framework/config/config.h"
#include "framework/error.h"
#include "parallel/estimate/parameter_server_cost.h"
#include "parallel/estimate/pipeline_cost.h"
#include "parallel/estimate/tensor_parallel_cost.h"

namespace strata::estimate {

const char* strategy_name(Strategy s) {
  switch (s) {
    case Strategy::kDpRing: return "dp-ring";
    case Strategy::kDpTree: return "dp-tree";
    case Strategy::kDpNoOverlap: return "dp-no-overlap";
    case Strategy::kPsCentralWorst: return "ps-central-worst";
    case Strategy::kPsCentralBest: return "ps-central-best";
    case Strategy::kPsSharded: return "ps-sharded";
    case Strategy::kPipeline: return "pipeline";
    case Strategy::kTensor: return "tp";
  }
  return "?";
}

const std::vector<Strategy>& all_strategies() {
  static const std::vector<Strategy> all = {Strategy::kDpRing,         Strategy::kDpTree,        Strategy::kDpNoOverlap,
                                            Strategy::kPsCentralWorst, Strategy::kPsCentralBest, Strategy::kPsSharded,
                                            Strategy::kPipeline,       Strategy::kTensor};
  return all;
}

std::vector<Strategy> parse_strategies(const std::string& list) {
  std::vector<std::string> names = {"ps-central"};
  for (Strategy s : all_strategies()) names.push_back(strategy_name(s));
  std::vector<Strategy> out;
  auto add = [&](Strategy s) {
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  };
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    if (item == "ps-central") {
      add(Strategy::kPsCentralWorst);
      add(Strategy::kPsCentralBest);
      continue;
    }
    bool found = false;
    for (Strategy s : all_strategies()) {
      if (item == strategy_name(s)) add(s), found = true;
    }
    if (!found) {
      std::string known;
      for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
      const std::string near = nearest_key(item, names);
      fail<ConfigError>("--strategy: unknown strategy '", item, "'",
                        near.empty() ? "" : "; did you mean '" + near + "'?", " (known: ", known, ")");
    }
  }
  if (out.empty()) fail<ConfigError>("--strategy: no strategy given (known: dp-ring, dp-tree, ...)");
  return out;
}

StepProfile on_shared_cores(const StepProfile& profile, int workers, int cores) {
  if (cores <= 0 || workers <= cores) return profile;
  StepProfile p = profile;
  const double slow = (workers + cores - 1) / cores;  // the most workers any core holds
  for (LayerProfile& l : p.layers) {
    l.forward *= slow;
    l.backward *= slow;
  }
  return p;
}

StepEstimate estimate_step(Strategy s, const StepProfile& unshared, int workers, const Link& link,
                           const StrategyOptions& options) {
  if (s == Strategy::kPipeline && options.host_cores > 0) {
    return pipeline_step_on_cores(unshared, workers, options.micro_batches, link, options.host_cores,
                                  options.schedule);
  }
  const StepProfile profile = on_shared_cores(unshared, workers, options.host_cores);
  DataParallelOptions dp = options.data;
  switch (s) {
    case Strategy::kDpRing:
    case Strategy::kDpTree:
    case Strategy::kDpNoOverlap:
      dp.algorithm = s == Strategy::kDpTree ? AllreduceAlgorithm::kTree : AllreduceAlgorithm::kRing;
      dp.overlap = s == Strategy::kDpNoOverlap ? parallel::Overlap::kOff : parallel::Overlap::kOn;
      return data_parallel_step(profile, workers, link, dp);
    case Strategy::kPsCentralWorst: return central_server_step(profile, workers, link, ServerArrangement::kWorst);
    case Strategy::kPsCentralBest: return central_server_step(profile, workers, link, ServerArrangement::kBest);
    case Strategy::kPsSharded:
      return sharded_server_step(profile, workers, options.shards > 0 ? options.shards : workers, link);
    case Strategy::kPipeline: return pipeline_step(profile, workers, options.micro_batches, link);
    case Strategy::kTensor: return tensor_parallel_step(profile, workers, link);
  }
  fail<Error>("unknown strategy");
}

}  // namespace strata::estimate
