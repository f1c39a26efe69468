// Settings of model parallelism: the `parallel { pipeline { } tensor { } }`
// blocks of a solver file (beside `data { }`, parallel/data_parallel/data_parallel_config.h),
// overridable from the `strata train` command line (--pp, --micro-batches,
// --schedule, --tp).
//
//   parallel {
//     pipeline {
//       stages: 2            # pipeline stages P (ranks per pipeline); 1 = no pipeline
//       micro_batches: 4     # M micro-batches per step (the data layer's batch is one
//                            # micro-batch; a step trains on M of them, like iter_size M)
//       schedule: ONE_F_ONE_B  # GPIPE or ONE_F_ONE_B
//     }
//     tensor { size: 1 }     # tensor-parallel group size
//   }
//
// The data-parallel degree is what is left: dp = world / (stages x size).
#pragma once

#include <string>
#include <vector>

#include "framework/config/config.h"

namespace strata::parallel {

// GPIPE: all forwards, then all backwards (M micro-batches of activations
// kept). ONE_F_ONE_B: PipeDream-flush (at most P micro-batches kept).
enum class PipelineSchedule { kGPipe, kOneFOneB };

struct PipelineConfig {
  int stages = 1;
  int micro_batches = 1;
  PipelineSchedule schedule = PipelineSchedule::kOneFOneB;
  // "2 stages, 4 micro-batches, ONE_F_ONE_B"
  std::string summary() const;
};

struct ModelParallelConfig {
  PipelineConfig pipeline;
  int tensor_size = 1;
};

const std::vector<std::string>& pipeline_keys();  // keys of `parallel { pipeline { } }`
const std::vector<std::string>& tensor_keys();    // keys of `parallel { tensor { } }`

// Reads the pipeline and tensor blocks of the solver's `parallel` block
// (the data block is parse_data_parallel_config's). ConfigError names the
// key and its file:line:col.
ModelParallelConfig parse_model_parallel_config(const ConfigNode& parallel_block);

// "GPIPE"/"gpipe", "ONE_F_ONE_B"/"1f1b"/"one_f_one_b"; ConfigError naming `where` otherwise.
PipelineSchedule parse_pipeline_schedule(const std::string& text, const std::string& where);
const char* pipeline_schedule_name(PipelineSchedule s);  // "GPIPE", "ONE_F_ONE_B"
// A positive count from a flag value; ConfigError naming `where` otherwise.
int parse_positive_count(const std::string& text, const std::string& where);

}  // namespace strata::parallel
