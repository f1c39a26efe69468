// The per-layer times file: what `strata time --out FILE` writes and
// `strata estimate --times FILE` reads, so times measured on one machine (a
// GPU node) can be estimated on another. CSV with `#` comment lines, three
// of which carry the net's name, per-worker batch and activation scale
// (step_profile.h; 2, Caffe's layout, when absent, as in older files):
//
//   # net: digits
//   # batch: 64
//   # activation_scale: 1.2
//   layer,type,forward_ms,backward_ms,grad_bytes,top_bytes,bottom_bytes,split,param_bytes,activation_bytes
//   conv1,Convolution,0.1210,0.2034,1280,524288,16384,,1280,524288
//
// Columns are found by their header name; layer, forward_ms, backward_ms and
// grad_bytes are required, the others default to empty or 0, except
// param_bytes (default: grad_bytes) and activation_bytes (default:
// top_bytes). Times are per step on one worker, in milliseconds; bytes as in
// step_profile.h.
#pragma once

#include <string>

#include "parallel/estimate/step_profile.h"

namespace strata::estimate {

// IoError if it cannot be written.
void write_times_file(const std::string& path, const StepProfile& profile, const std::string& comment);
// IoError if it cannot be read; ConfigError naming file:line for a bad row.
StepProfile read_times_file(const std::string& path);

}  // namespace strata::estimate
