// The order in which one pipeline stage runs the forward (F) and backward
// (B) passes of the M micro-batches of a step.
//
// GPIPE, P = 3 stages, M = 4 micro-batches (time ->; '.' = idle, the bubble):
//   stage 0: F0 F1 F2 F3 .  .  .  .  B0 B1 B2 B3
//   stage 1: .  F0 F1 F2 F3 .  .  B0 B1 B2 B3 .
//   stage 2: .  .  F0 F1 F2 F3 B0 B1 B2 B3 .  .
// Every stage keeps the activations of all M micro-batches until its first
// backward.
//
// ONE_F_ONE_B (PipeDream-flush), same P and M: stage s runs P-1-s warm-up
// forwards, then alternates one forward and one backward, then drains:
//   stage 0: F0 F1 .  .  B0 F2 .  B1 F3 .  B2 .  B3
//   stage 1: .  F0 F1 .  B0 F2 B1 .  F3 B2 .  B3 .
//   stage 2: .  .  F0 B0 F1 B1 F2 B2 F3 B3 .  .  .
// Stage s holds at most min(P - s, M) micro-batches of activations; the
// bubble is the same (P-1)/(M+P-1) of the step, but memory no longer grows
// with M.
//
// Backwards run in micro-batch order on both schedules, so gradients
// accumulate in the same order as iter_size passes in one process.
#pragma once

#include <string>
#include <vector>

#include "parallel/model_parallel/model_parallel_config.h"

namespace strata::parallel {

enum class PipeOpKind { kForward, kBackward };

struct PipeOp {
  PipeOpKind kind = PipeOpKind::kForward;
  int micro = 0;
};

// The ops of `stage` (0-based) for one step. ConfigError on bad counts.
std::vector<PipeOp> pipeline_ops(PipelineSchedule schedule, int stages, int stage, int micro_batches);

// The most micro-batches whose activations are alive at once in `ops`
// (forward done, backward not yet): the activation slots a stage needs.
int max_in_flight(const std::vector<PipeOp>& ops);

// The theoretical idle share of a step, (P-1)/(M+P-1), for equal stages.
double theoretical_bubble(int stages, int micro_batches);

// "F0 F1 B0 F2 B1 B2"
std::string ops_str(const std::vector<PipeOp>& ops);

}  // namespace strata::parallel
