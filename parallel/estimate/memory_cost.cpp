#include "parallel/estimate/memory_cost.h"

#include <algorithm>

#include "framework/error.h"
#include "parallel/model_parallel/pipeline_schedule.h"

namespace strata::estimate {

DeviceMemory stage_memory(const StepProfile& profile, const std::vector<int>& stage_of, int stage, int micro_batches,
                          const MemoryOptions& options) {
  STRATA_CHECK(stage_of.size() == profile.layers.size(), "stage_of has ", stage_of.size(), " entries for ",
               profile.layers.size(), " layers");
  STRATA_CHECK(micro_batches >= 1 && options.optimizer_slots >= 0, "micro-batches must be >= 1 and slots >= 0");
  const int stages = stage_of.empty() ? 1 : *std::max_element(stage_of.begin(), stage_of.end()) + 1;
  STRATA_CHECK(stage >= 0 && stage < stages, "stage ", stage, " of ", stages);
  DeviceMemory m;
  m.stage = stage;
  // The schedule's own count, so that the estimate and the pipeline agree.
  m.in_flight = parallel::max_in_flight(parallel::pipeline_ops(options.schedule, stages, stage, micro_batches));
  double created = 0.0;
  for (size_t i = 0; i < profile.layers.size(); ++i) {
    if (stage_of[i] != stage) continue;
    const LayerProfile& l = profile.layers[i];
    m.weights += l.param_bytes;
    m.gradients += l.grad_bytes;
    created += l.activation_bytes;
  }
  m.optimizer = options.optimizer_slots * m.gradients;
  m.activations = m.in_flight * profile.activation_scale * created / micro_batches;
  return m;
}

DeviceMemory largest_stage_memory(const StepProfile& profile, const std::vector<int>& stage_of, int micro_batches,
                                  const MemoryOptions& options) {
  const int stages = stage_of.empty() ? 1 : *std::max_element(stage_of.begin(), stage_of.end()) + 1;
  DeviceMemory largest;
  for (int s = 0; s < stages; ++s) {
    const DeviceMemory m = stage_memory(profile, stage_of, s, micro_batches, options);
    if (s == 0 || m.total() > largest.total()) largest = m;
  }
  return largest;
}

}  // namespace strata::estimate
