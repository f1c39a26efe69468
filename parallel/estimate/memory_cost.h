// The memory one device needs to train its part of a net: one pipeline
// stage's layers, or (tensor parallel) one rank's share of them, as
// tensor_parallel_rank_profile gives it.
//
//   weights      sum over the stage's layers of param_bytes
//   gradients    sum of grad_bytes (a gradient beside every learnable value)
//   optimizer    slots x gradients (param-sized history per learnable value:
//                SGD's momentum 1, Adam's two moments 2; as NetOptions::optimizer_slots)
//   activations  in_flight x scale x sum of activation_bytes / m
//
// Activations: each micro-batch (1/m of the batch) whose forward has run and
// whose backward has not keeps the outputs its layers created and their
// gradients, as the net's memory plan lays them out: `scale` is the
// profile's activation_scale (step_profile.h), 2 in Caffe's layout (a
// gradient beside every output), the plan's own ratio by lifetime, which
// shares buffers between outputs and gradients whose lives do not overlap.
// How many are in flight at once is the schedule's (pipeline_schedule.h):
//
//   GPIPE        every stage keeps all m
//   ONE_F_ONE_B  stage s keeps min(p - s, m): stage 0 the most
//
// Not counted: tensors layers keep for themselves (scratch, a data set a data
// layer loads), the allocator's slack, the CUDA context, communication buffers.
#pragma once

#include <vector>

#include "parallel/estimate/step_profile.h"
#include "parallel/model_parallel/model_parallel_config.h"

namespace strata::estimate {

struct MemoryOptions {
  int optimizer_slots = 1;  // SGD with momentum (strata's SGD keeps its buffer even at momentum 0)
  parallel::PipelineSchedule schedule = parallel::PipelineSchedule::kOneFOneB;
};

struct DeviceMemory {
  int stage = 0;      // which pipeline stage this device runs
  int in_flight = 1;  // micro-batches whose activations it keeps at once
  double weights = 0.0;
  double gradients = 0.0;
  double optimizer = 0.0;
  double activations = 0.0;
  double total() const { return weights + gradients + optimizer + activations; }
};

// The memory of a device of stage `stage`, with `stage_of` the stage of each
// layer of `profile` (pipeline_stage_of) and the batch cut into `micro_batches`.
DeviceMemory stage_memory(const StepProfile& profile, const std::vector<int>& stage_of, int stage, int micro_batches,
                          const MemoryOptions& options);

// The device that needs the most, over all stages.
DeviceMemory largest_stage_memory(const StepProfile& profile, const std::vector<int>& stage_of, int micro_batches,
                                  const MemoryOptions& options);

}  // namespace strata::estimate
