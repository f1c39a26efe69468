#include "parallel/estimate/pipeline_cost.h"

#include <algorithm>
#include <string>
#include <vector>

#include "framework/error.h"
#include "parallel/model_parallel/pipeline_balance.h"
#include "parallel/model_parallel/pipeline_schedule.h"

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

// One stage's work per micro-batch: its layers' forward and backward / m,
// and the copies of the activations and gradients crossing its cuts.
struct StageWork {
  double forward = 0.0;
  double backward = 0.0;
  double transfers = 0.0;
};

// The net cut into `stages` as the training code cuts it, each stage's
// work; `refusal` says why it cannot be cut (then `work` is empty).
struct PipelineCut {
  std::vector<StageWork> work;
  double communication = 0.0;  // seconds of transfers per step, both directions
  std::string refusal;
};

PipelineCut cut_pipeline(const StepProfile& profile, int stages, int micro_batches, const Link& link) {
  const int n = static_cast<int>(profile.layers.size());
  PipelineCut cut;
  if (stages > n) {
    cut.refusal = std::to_string(stages) + " stages but the net has " + std::to_string(n) + " layers";
    return cut;
  }
  const std::vector<int> stage_of = parallel::balance_stages(layer_costs(profile), stages);
  cut.work.resize(stages);
  for (int i = 0; i < n; ++i) {
    StageWork& w = cut.work[stage_of[i]];
    w.forward += profile.layers[i].forward / micro_batches;
    w.backward += profile.layers[i].backward / micro_batches;
    if (i + 1 < n && stage_of[i + 1] != stage_of[i]) {
      // Activations forward, their gradient back; both stages take part in each.
      const double one_way = transfer_seconds(link, profile.layers[i].top_bytes / micro_batches);
      w.transfers += 2 * one_way;
      cut.work[stage_of[i + 1]].transfers += 2 * one_way;
      cut.communication += 2 * one_way * micro_batches;
    }
  }
  return cut;
}
}  // namespace

std::vector<int> pipeline_stage_of(const StepProfile& profile, int stages) {
  STRATA_CHECK(stages >= 1 && stages <= static_cast<int>(profile.layers.size()), "cannot cut ",
               profile.layers.size(), " layers into ", stages, " stages");
  return parallel::balance_stages(layer_costs(profile), stages);
}

StepEstimate pipeline_step(const StepProfile& profile, int stages, int micro_batches, const Link& link) {
  STRATA_CHECK(stages >= 1 && micro_batches >= 1, "stages and micro-batches must be >= 1");
  const PipelineCut cut = cut_pipeline(profile, stages, micro_batches, link);
  if (!cut.refusal.empty()) return infeasible(stages, cut.refusal);
  double slot = 0.0;
  for (const StageWork& w : cut.work) slot = std::max(slot, w.forward + w.backward + w.transfers);
  StepEstimate e;
  e.workers = stages;
  e.samples = profile.batch;
  e.step = (micro_batches + stages - 1) * slot;
  e.communication = cut.communication;
  e.exposed = std::max(0.0, e.step - profile.compute_seconds() / stages);  // the bubble and the sends
  return e;
}

StepEstimate pipeline_step_on_cores(const StepProfile& profile, int stages, int micro_batches, const Link& link,
                                    int cores, parallel::PipelineSchedule schedule) {
  STRATA_CHECK(stages >= 1 && micro_batches >= 1 && cores >= 1, "stages, micro-batches and cores must be >= 1");
  const PipelineCut cut = cut_pipeline(profile, stages, micro_batches, link);
  if (!cut.refusal.empty()) return infeasible(stages, cut.refusal);
  // done[kind][stage][micro]: whether that op has finished.
  std::vector<std::vector<std::vector<char>>> done(2, std::vector<std::vector<char>>(stages,
                                                                                    std::vector<char>(micro_batches, 0)));
  struct Running {
    std::vector<parallel::PipeOp> ops;
    size_t next = 0;
    double remaining = -1.0;  // < 0: the next op has not started
  };
  std::vector<Running> stage(stages);
  for (int j = 0; j < stages; ++j) stage[j].ops = parallel::pipeline_ops(schedule, stages, j, micro_batches);
  auto input_arrived = [&](int j, const parallel::PipeOp& op) {
    if (op.kind == parallel::PipeOpKind::kForward) return j == 0 || done[0][j - 1][op.micro] != 0;
    return done[0][j][op.micro] != 0 && (j == stages - 1 || done[1][j + 1][op.micro] != 0);
  };
  double now = 0.0;
  for (;;) {
    int running = 0;
    bool finished = true;
    for (int j = 0; j < stages; ++j) {
      Running& s = stage[j];
      if (s.next == s.ops.size()) continue;
      finished = false;
      const parallel::PipeOp& op = s.ops[s.next];
      if (s.remaining < 0 && input_arrived(j, op)) {
        const StageWork& w = cut.work[j];
        s.remaining = (op.kind == parallel::PipeOpKind::kForward ? w.forward : w.backward) + w.transfers / 2;
      }
      if (s.remaining >= 0) ++running;
    }
    if (finished) break;
    STRATA_CHECK(running > 0, "pipeline simulation: no stage can run (schedule deadlock)");
    const double rate = std::min(1.0, static_cast<double>(cores) / running);
    double step = -1.0;
    for (const Running& s : stage) {
      if (s.next < s.ops.size() && s.remaining >= 0 && (step < 0 || s.remaining / rate < step)) step = s.remaining / rate;
    }
    now += step;
    for (int j = 0; j < stages; ++j) {
      Running& s = stage[j];
      if (s.next == s.ops.size() || s.remaining < 0) continue;
      s.remaining -= step * rate;
      if (s.remaining <= 1e-15) {
        const parallel::PipeOp& op = s.ops[s.next];
        done[op.kind == parallel::PipeOpKind::kForward ? 0 : 1][j][op.micro] = 1;
        ++s.next;
        s.remaining = -1.0;
      }
    }
  }
  StepEstimate e;
  e.workers = stages;
  e.samples = profile.batch;
  e.step = now;
  e.communication = cut.communication;
  e.exposed = std::max(0.0, e.step - profile.compute_seconds() / std::min(stages, cores));
  return e;
}

}  // namespace strata::estimate
