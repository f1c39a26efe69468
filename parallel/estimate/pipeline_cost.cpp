#include "parallel/estimate/pipeline_cost.h"

#include <algorithm>
#include <vector>

#include "framework/error.h"
#include "parallel/model_parallel/pipeline_balance.h"

namespace strata::estimate {

double bubble_fraction(int stages, int micro_batches) {
  STRATA_CHECK(stages >= 1 && micro_batches >= 1, "stages and micro-batches must be >= 1");
  return static_cast<double>(stages - 1) / (micro_batches + stages - 1);
}

namespace {
std::vector<parallel::LayerCost> layer_costs(const StepProfile& profile) {
  std::vector<parallel::LayerCost> costs;
  for (const LayerProfile& l : profile.layers) {
    costs.push_back({l.name, l.forward + l.backward, static_cast<size_t>(l.grad_bytes + l.top_bytes)});
  }
  return costs;
}
}  // namespace

std::vector<int> pipeline_stage_of(const StepProfile& profile, int stages) {
  STRATA_CHECK(stages >= 1 && stages <= static_cast<int>(profile.layers.size()), "cannot cut ",
               profile.layers.size(), " layers into ", stages, " stages");
  return parallel::balance_stages(layer_costs(profile), stages);
}

StepEstimate pipeline_step(const StepProfile& profile, int stages, int micro_batches, const Link& link) {
  STRATA_CHECK(stages >= 1 && micro_batches >= 1, "stages and micro-batches must be >= 1");
  const int n = static_cast<int>(profile.layers.size());
  if (stages > n) {
    return infeasible(stages, std::to_string(stages) + " stages but the net has " + std::to_string(n) + " layers");
  }
  const std::vector<parallel::LayerCost> costs = layer_costs(profile);
  const std::vector<int> stage_of = parallel::balance_stages(costs, stages);
  std::vector<double> slot(stages, 0.0);
  double communication = 0.0;
  for (int i = 0; i < n; ++i) {
    slot[stage_of[i]] += costs[i].seconds / micro_batches;
    if (i + 1 < n && stage_of[i + 1] != stage_of[i]) {
      // Activations forward, their gradient back, both stages wait for each.
      const double cut = 2 * transfer_seconds(link, profile.layers[i].top_bytes / micro_batches);
      slot[stage_of[i]] += cut;
      slot[stage_of[i + 1]] += cut;
      communication += cut * micro_batches;
    }
  }
  StepEstimate e;
  e.workers = stages;
  e.samples = profile.batch;
  e.step = (micro_batches + stages - 1) * *std::max_element(slot.begin(), slot.end());
  e.communication = communication;
  e.exposed = std::max(0.0, e.step - profile.compute_seconds() / stages);  // the bubble and the sends
  return e;
}

}  // namespace strata::estimate
