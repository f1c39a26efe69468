// Settings of synchronous data-parallel training: the `parallel { data { } }`
// block of a solver file, overridable from the `strata train` command line.
//
//   parallel {
//     data {
//       backend: "auto"      # "auto", "tcp" or "mpi"
//       algorithm: "auto"    # "auto", "ring" or "tree" (allreduce algorithm)
//       transport: "auto"    # "auto", "tcp", "shm" or "rdma" (tcp backend's bytes,
//                            # parallel/transport/transport_select.h)
//       bucket_mb: 25        # gradient bucket size in MiB (> 0)
//       overlap: true        # allreduce buckets while backward still runs
//       compression: NONE    # NONE, FP16 or BF16: dtype of gradients on the wire
//       shard: NONE          # NONE, OPTIMIZER (ZeRO-1), GRADIENTS (ZeRO-2); PARAMETERS
//                            # (ZeRO-3) is refused: not built yet (sharded_update.h)
//     }
//   }
//
// The settings only matter when the run has more than one rank (see
// parallel/rendezvous/env.h); a single process ignores them (but they are validated).
#pragma once

#include <string>
#include <vector>

#include "framework/config/config.h"
#include "parallel/codec/gradient_codec.h"

namespace strata::parallel {

enum class Overlap { kOn, kOff };

// What each data-parallel rank keeps only a slice of (ZeRO's stages, in order).
enum class ShardStage { kNone, kOptimizer, kGradients, kParameters };
// "NONE", "OPTIMIZER", "GRADIENTS", "PARAMETERS": the index of the stage.
const std::vector<std::string>& shard_stage_names();
const char* shard_stage_name(ShardStage s);
// A name of shard_stage_names() -> the stage; ConfigError naming `where`
// otherwise, and for PARAMETERS (stage 3 is not built yet).
ShardStage parse_shard_stage(const std::string& name, const std::string& where);

struct DataParallelConfig {
  std::string backend = "auto";
  std::string algorithm = "auto";
  std::string transport = "auto";
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

// Command-line overrides; each throws ConfigError naming the flag on a bad value.
void check_backend(const std::string& backend, const std::string& where);
void check_algorithm(const std::string& algorithm, const std::string& where);
void check_transport(const std::string& transport, const std::string& where);
double parse_bucket_mb(const std::string& text, const std::string& where);

}  // namespace strata::parallel
