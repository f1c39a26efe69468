// Settings of synchronous data-parallel training: the `parallel { data { } }`
// block of a solver file, overridable from the `strata train` command line.
//
//   parallel {
//     data {
//       backend: "auto"      # "auto", "tcp", "nccl" or "mpi"
//       algorithm: "auto"    # "auto", "ring" or "tree" (allreduce algorithm)
//       transport: "auto"    # "auto", "tcp", "shm" or "rdma" (tcp backend's bytes,
//                            # parallel/transport/transport_select.h)
//       bucket_mb: 25        # gradient bucket size in MiB (> 0)
//       overlap: true        # allreduce buckets while backward still runs
//       compression: NONE    # NONE, FP16 or BF16: dtype of gradients on the wire
//       shard: NONE          # NONE, OPTIMIZER (ZeRO-1), GRADIENTS (ZeRO-2) or PARAMETERS
//                            # (ZeRO-3; sharded_update.h, weight_gathering.h)
//     }
//   }
//
// The settings only matter when the run has more than one rank (see
// parallel/rendezvous/env.h); a single process ignores them (but they are validated).
#pragma once

#include <string>
#include <vector>

#include "framework/config/config.h"
#include "parallel/backends/communicator_factory.h"
#include "parallel/codec/gradient_codec.h"
#include "parallel/transport/transport_select.h"

namespace strata::parallel {

enum class Overlap { kOn, kOff };

// What each data-parallel rank keeps only a slice of (ZeRO's stages, in order).
enum class ShardStage { kNone, kOptimizer, kGradients, kParameters };
// "NONE", "OPTIMIZER", "GRADIENTS", "PARAMETERS": the index of the stage.
const std::vector<std::string>& shard_stage_names();
const char* shard_stage_name(ShardStage s);
// A name of shard_stage_names() -> the stage; ConfigError naming `where`
// otherwise.
ShardStage parse_shard_stage(const std::string& name, const std::string& where);

struct DataParallelConfig {
  BackendChoice backend = BackendChoice::kAuto;
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kAuto;
  TransportChoice transport = TransportChoice::kAuto;
  double bucket_mb = 25.0;
  Overlap overlap = Overlap::kOn;
  GradCompression compression = GradCompression::kNone;
  ShardStage shard = ShardStage::kNone;

  // Bucket capacity in bytes of f32 gradients (at least one float).
  size_t bucket_bytes() const;
  // "tcp/ring, transport auto, 25 MB buckets, overlap on, compression none"
  // (and ", shard OPTIMIZER" when sharded)
  std::string summary() const;
};

const std::vector<std::string>& parallel_keys();       // keys of `parallel { }`
const std::vector<std::string>& data_parallel_keys();  // keys of `parallel { data { } }`

// Reads the solver file's `parallel` block (SolverConfig::parallel; an empty
// block gives the defaults). ConfigError names the key and its file:line:col.
DataParallelConfig parse_data_parallel_config(const ConfigNode& parallel_block);

// Command-line overrides, parsed; each throws ConfigError naming the flag
// (`where`) and the known names on a bad value.
BackendChoice parse_dp_backend(const std::string& text, const std::string& where);  // not "local"
AllreduceAlgorithm parse_dp_algorithm(const std::string& text, const std::string& where);
TransportChoice parse_dp_transport(const std::string& text, const std::string& where);
double parse_bucket_mb(const std::string& text, const std::string& where);

}  // namespace strata::parallel
