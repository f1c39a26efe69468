// A step profile scaled to a device that is not here: the step time becomes
// the per-worker batch over a published per-device throughput (images/s of
// one device training alone), split over the layers by an assumption,
// since a throughput says nothing about single layers:
//
//   - by the layers' FLOPs when they were counted (a net built here:
//     tools/strata/layer_flops.h counts a layer's backward as twice its
//     forward: the gradients of the input and of the weights each cost one
//     forward; nothing for a layer that needs no backward);
//   - else in proportion to the times measured here (a --times file), which
//     keeps their split.
//
// FLOPs are a stand-in for time: on a GPU the memory-bound layers (batch
// norm, ReLU, pooling) take more than their FLOPs say, so gradients are
// ready somewhat later than modelled and overlap is a little optimistic.
// Activation bytes and FLOPs scale with the batch (they are per step).
#pragma once

#include <string>

#include "parallel/estimate/step_profile.h"

namespace strata::estimate {

struct DeviceThroughput {
  double samples_per_second = 0.0;  // one device training alone
  int batch = 0;                    // per-worker batch it was measured at; 0 = the profile's
};

// The profile on that device, and in `how` a sentence saying how the step
// was split (printed with the table). ConfigError for a throughput <= 0 or a
// profile with neither FLOPs nor times to split by.
StepProfile scale_to_throughput(const StepProfile& profile, const DeviceThroughput& device, std::string* how);

}  // namespace strata::estimate
