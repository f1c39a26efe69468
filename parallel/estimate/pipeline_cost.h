// Pipeline parallel (parallel/model_parallel/): the layers cut into p
// contiguous stages, one per worker, the batch into m micro-batches. Stages
// are cut as the training code cuts them (balance_stages: the slowest stage
// as fast as possible).
//
// GPipe (Huang et al., "GPipe", NeurIPS 2019) and 1F1B (Narayanan et al.,
// "Memory-Efficient Pipeline-Parallel DNN Training", ICML 2021) both take
// m + p - 1 slots of the slowest stage per step, so the idle share (the
// bubble) is (p - 1) / (m + p - 1):
//
//   stage 0  F1 F2 F3 F4 .. .. .. B4 B3 B2 B1
//   stage 1  .. F1 F2 F3 F4 .. B4 B3 B2 B1 ..      (GPipe, p = 2, m = 4)
//
//   slot     = max over stages j of  (f_j + b_j) / m + sum over the cuts next to j of 2·(alpha + A_cut / (m·B))
//   step     = (m + p - 1) · slot
//
// with A_cut the bytes of the activations crossing a cut (the top of the
// stage's last layer, which holds for a chain of layers) sent forward, and
// their gradient the same size sent back. Assumed: a layer's time on a
// micro-batch is its time on the batch / m (optimistic: small batches use a
// device less well), sends do not overlap compute. One pipeline processes
// one batch per step: strong scaling.
//
// Stages that share fewer cores than there are stages (processes of one
// thread on one host) are not simply slowed by stages / cores: a stage idle
// in the bubble leaves its core to the others, and stages that block and
// wake at every micro-batch are spread over the idle cores as they wake. pipeline_step_on_cores
// simulates the schedule instead: each stage runs its ops in the schedule's
// order (parallel/model_parallel/pipeline_schedule.h), an op starts once
// its input arrived, and the stages running at any moment share the cores
// equally (each at min(1, cores / running) of full speed). A send and a
// receive are work of the stage that makes them (a copy through memory).
#pragma once

#include <vector>

#include "parallel/estimate/link.h"
#include "parallel/estimate/step_estimate.h"
#include "parallel/model_parallel/model_parallel_config.h"

namespace strata::estimate {

// (p - 1) / (m + p - 1).
double bubble_fraction(int stages, int micro_batches);

// The stage of each layer, as pipeline_step cuts them (1 <= stages <= layers).
std::vector<int> pipeline_stage_of(const StepProfile& profile, int stages);

// Infeasible (with the reason) when there are more stages than layers.
StepEstimate pipeline_step(const StepProfile& profile, int stages, int micro_batches, const Link& link);

// The same pipeline on a host of `cores` cores shared by its stages, by
// simulating `schedule` (see above). Infeasible as pipeline_step is.
StepEstimate pipeline_step_on_cores(const StepProfile& profile, int stages, int micro_batches, const Link& link,
                                    int cores, parallel::PipelineSchedule schedule);

}  // namespace strata::estimate
