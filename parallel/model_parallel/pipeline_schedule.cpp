#include "parallel/model_parallel/pipeline_schedule.h"

#include <algorithm>

#include "framework/error.h"

namespace strata::parallel {

std::vector<PipeOp> pipeline_ops(PipelineSchedule schedule, int stages, int stage, int micro_batches) {
  if (stages < 1 || stage < 0 || stage >= stages || micro_batches < 1) {
    fail<ConfigError>("bad pipeline shape: stage ", stage, " of ", stages, " with ", micro_batches, " micro-batches");
  }
  std::vector<PipeOp> ops;
  const int m = micro_batches;
  if (schedule == PipelineSchedule::kGPipe) {
    for (int i = 0; i < m; ++i) ops.push_back({PipeOpKind::kForward, i});
    for (int i = 0; i < m; ++i) ops.push_back({PipeOpKind::kBackward, i});
    return ops;
  }
  const int warmup = std::min(stages - 1 - stage, m);
  int f = 0, b = 0;
  for (; f < warmup; ++f) ops.push_back({PipeOpKind::kForward, f});
  while (f < m) {
    ops.push_back({PipeOpKind::kForward, f++});
    ops.push_back({PipeOpKind::kBackward, b++});
  }
  while (b < m) ops.push_back({PipeOpKind::kBackward, b++});
  return ops;
}

int max_in_flight(const std::vector<PipeOp>& ops) {
  int live = 0, most = 0;
  for (const PipeOp& op : ops) {
    live += op.kind == PipeOpKind::kForward ? 1 : -1;
    most = std::max(most, live);
  }
  return most;
}

double theoretical_bubble(int stages, int micro_batches) {
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

std::string ops_str(const std::vector<PipeOp>& ops) {
  std::string s;
  for (const PipeOp& op : ops) {
    s += (s.empty() ? "" : " ") + std::string(op.kind == PipeOpKind::kForward ? "F" : "B") + std::to_string(op.micro);
  }
  return s;
}

}  // namespace strata::parallel
