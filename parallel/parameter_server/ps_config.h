// Settings of parameter-server training: the `parallel { ps { } }` block of a
// solver file, overridable from the `strata train` command line
// (--ps-mode, --staleness, --ps-placement, --ps-servers), and the roles of
// the ranks that follow from them.
//
//   parallel {
//     ps {
//       mode: ASYNC          # SYNC, ASYNC or SSP
//       staleness: 3         # SSP: how many steps a worker may run ahead of the slowest
//       placement: SHARDED   # CENTRAL, SHARDED or COLOCATED (default: from the server count)
//       servers: 2           # server processes at the end of the ranks (strata launch --servers)
//       compression: NONE    # NONE, FP16 or BF16: gradients on the wire
//     }
//   }
//
// Ranks: with K servers among W ranks, ranks 0 .. W-K-1 are workers and the
// last K are servers (strata launch --nproc N --servers K starts N + K
// processes and sets STRATA_PS_SERVERS=K; under mpirun or srun give
// --ps-servers K). COLOCATED has no server processes: every rank is a worker
// and also serves one shard, from a thread.
#pragma once

#include <string>
#include <vector>

#include "framework/config/config.h"
#include "parallel/codec/gradient_codec.h"
#include "parallel/transport/transport_select.h"

namespace strata::parallel {

enum class PsMode {
  kSync,   // the servers wait for every worker's gradient of a step: equals allreduce data parallel
  kAsync,  // each gradient is applied when it arrives; workers never wait for each other
  kSsp,    // stale synchronous: a worker may be at most `staleness` steps ahead of the slowest
};
enum class PsPlacement {
  kCentral,    // one server process holds every parameter
  kSharded,    // the parameters split over K server processes, balanced by bytes
  kColocated,  // every rank a worker and the server of one shard
};

struct ParameterServerConfig {
  bool enabled = false;  // a ps block or a --ps-* flag asked for a parameter server
  PsMode mode = PsMode::kAsync;
  int staleness = 3;
  bool placement_given = false;
  PsPlacement placement = PsPlacement::kCentral;
  int servers = -1;  // server processes; -1: STRATA_PS_SERVERS, else 0
  GradCompression compression = GradCompression::kNone;
  // What carries each worker-server pair's bytes: the run's transport
  // (--dp-transport, `transport:` of parallel { data { } }; transport_select.h).
  TransportChoice transport = TransportChoice::kAuto;

  // "ASYNC, 2 sharded servers, 3 workers"
  std::string summary(int workers, int shards) const;
};

const std::vector<std::string>& ps_keys();  // keys of `parallel { ps { } }`
const char* ps_mode_name(PsMode m);          // "SYNC", "ASYNC", "SSP"
const char* ps_placement_name(PsPlacement p);  // "CENTRAL", "SHARDED", "COLOCATED"

// Reads `parallel { ps { } }` (absent: enabled == false). ConfigError names
// the key and its file:line:col.
ParameterServerConfig parse_ps_config(const ConfigNode& parallel_block);
// Command-line values; ConfigError naming the flag.
PsMode parse_ps_mode(const std::string& text, const std::string& where);
PsPlacement parse_ps_placement(const std::string& text, const std::string& where);

// Who does what in a run of `world_size` ranks.
struct PsRoles {
  int workers = 0;  // ranks 0 .. workers-1
  int servers = 0;  // server processes: ranks workers .. world_size-1
  int shards = 0;   // key ranges: 1 (central), servers (sharded), workers (colocated)
  PsPlacement placement = PsPlacement::kCentral;
  bool is_worker(int rank) const { return rank < workers; }
  // The shard a rank serves, or -1.
  int shard_of(int rank) const;
  // The rank that serves a shard.
  int rank_of_shard(int shard) const;
  // `message` with each "rank R on" of a rank that serves a shard written
  // "server S (rank R) on": how the job's failure names a lost server.
  std::string name_servers(const std::string& message) const;
};

// Resolves the server count (STRATA_PS_SERVERS when the config leaves it
// open) and the placement; ConfigError saying what to change when they do
// not fit the world (no worker left, CENTRAL with 2 servers, ...).
PsRoles resolve_ps_roles(ParameterServerConfig& config, int world_size);

}  // namespace strata::parallel
