// The dp x pp x tp process grid: every world rank is one (dp, pp, tp)
// position, with a communicator per axis joining the ranks that differ only
// in that coordinate.
//
// Order (Megatron's): tp varies fastest, then pp, then dp:
//   world_rank = (dp_rank * pp + pp_rank) * tp + tp_rank
// so the ranks of one tensor-parallel group are neighbours (same machine
// when ranks are packed per machine), and a pipeline's stages come next.
//
//   world 8 = dp 2 x pp 2 x tp 2:
//     rank  dp pp tp     dp group    pp group    tp group
//       0    0  0  0     {0,4}       {0,2}       {0,1}
//       1    0  0  1     {1,5}       {1,3}       {0,1}
//       2    0  1  0     {2,6}       {0,2}       {2,3}
//       ...
//
// Axis communicators: an axis of size 1 gets a LocalCommunicator; an axis
// that spans the whole world reuses the world communicator (not owned);
// otherwise the group gets its own communicator, of the world's backend:
// - tcp: new connections between the group's ranks, rendezvoused through the
//   world's store (a new client of rank 0's store server, from env's
//   STRATA_MASTER/STRATA_TOKEN, or the `store` given to the constructor)
//   under the key prefix "strata/grid/<axis>/<group index>".
// - nccl (GPUs): an NCCL communicator per group on the rank's GPU
//   (ProcessGridOptions::device), with a unique id of its own through the
//   same store under the same key prefix, wrapped in a
//   DeviceStagingCommunicator so that host tensors pass too. The
//   one-rank-per-GPU check runs per group (NCCL_HOSTID counts as the host).
// - mpi: needs MPI_Comm_split, not available yet: ConfigError when a grid
//   over mpi would need a proper sub-group (pure dp or pure tp worlds work,
//   as their axes are the world or single ranks; the pipeline needs a second
//   pp communicator, so pp > 1 needs tcp for now).
// - local (world of one rank): every axis is a LocalCommunicator.
// Each axis communicator's rank() is the rank's coordinate on that axis.
#pragma once

#include <memory>
#include <string>

#include "framework/communicator.h"
#include "parallel/rendezvous/env.h"

namespace strata::parallel {

class Store;

struct GridShape {
  int dp = 1, pp = 1, tp = 1;
  int world() const { return dp * pp * tp; }
  // "dp 2 x pp 2 x tp 1"
  std::string str() const;
};

// Picks dp = world / (pp * tp). ConfigError when pp or tp is < 1 or pp * tp
// does not divide the world size (the message says which sizes would).
GridShape make_grid_shape(int world_size, int pp, int tp);

// Position of a world rank on the grid, and back.
struct GridCoord {
  int dp = 0, pp = 0, tp = 0;
};
GridCoord grid_coord(const GridShape& shape, int world_rank);
int grid_rank(const GridShape& shape, const GridCoord& coord);

enum class GridAxis { kDp, kPp, kTp };
const char* grid_axis_name(GridAxis axis);  // "dp", "pp", "tp"

struct ProcessGridOptions {
  // Rendezvous store for the tcp group connections; null = connect a new
  // client to rank 0's store from env (STRATA_MASTER, STRATA_TOKEN).
  // Ranks-as-threads tests pass an in-memory store here.
  std::shared_ptr<Store> store;
  // Address other ranks connect to for group connections ("" = the
  // interface that routes to the master, as the world's tcp backend does).
  std::string advertise_host;
  // This rank's GPU, for nccl groups (a CPU device: a world over nccl is refused).
  Device device = Device::cpu();
};

class ProcessGrid {
 public:
  // Collective over `world`: every rank must construct its grid with the
  // same shape, in the same order relative to other collectives. ConfigError
  // when shape.world() != world.world_size(). `world` must outlive the grid.
  ProcessGrid(Communicator& world, GridShape shape, const RankEnv& env, ProcessGridOptions options = {});
  ~ProcessGrid();
  ProcessGrid(const ProcessGrid&) = delete;
  ProcessGrid& operator=(const ProcessGrid&) = delete;

  const GridShape& shape() const { return shape_; }
  int world_rank() const { return world_.rank(); }
  int dp_rank() const { return coord_.dp; }
  int pp_rank() const { return coord_.pp; }
  int tp_rank() const { return coord_.tp; }
  const GridCoord& coord() const { return coord_; }

  Communicator& world() { return world_; }
  Communicator& dp() { return *axis_[0]; }
  Communicator& pp() { return *axis_[1]; }
  Communicator& tp() { return *axis_[2]; }
  Communicator& axis(GridAxis a) { return *axis_[static_cast<int>(a)]; }

  // A further communicator over this rank's group on `axis` (same members
  // and ranks as axis(axis)), with its own connections: the pipeline sends
  // activations on pp() and gradients on a second one, so that a send
  // blocked in one direction never holds back a receive in the other.
  // Collective over the group; `name` must be the same on its ranks and
  // differ between the calls. Axis of size 1: a LocalCommunicator.
  std::unique_ptr<Communicator> new_communicator(GridAxis axis, const std::string& name);

  // The rank -> (dp, pp, tp) table (printed by rank 0 at start):
  //   process grid dp 1 x pp 2 x tp 1 (2 ranks)
  //     rank 0: dp 0  pp 0  tp 0
  //     rank 1: dp 0  pp 1  tp 0
  std::string describe() const;

 private:
  Communicator& world_;
  GridShape shape_;
  GridCoord coord_;
  std::unique_ptr<Communicator> connect_group(int axis, const std::string& name);
  std::unique_ptr<Communicator> connect_nccl_group(int axis, const std::string& prefix);
  void open_store(const std::string& who);

  RankEnv env_;
  ProcessGridOptions options_;
  std::unique_ptr<Communicator> owned_[3];
  Communicator* axis_[3] = {nullptr, nullptr, nullptr};
};

}  // namespace strata::parallel
