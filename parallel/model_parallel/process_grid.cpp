#include "parallel/model_parallel/process_grid.h"

#include <sstream>
#include <utility>

#include "framework/error.h"
#include "parallel/backends/host_staging_communicator.h"
#include "parallel/backends/nccl_communicator.h"
#include "parallel/rendezvous/store.h"
#include "parallel/backends/tcp_communicator.h"
#include "parallel/transport/tcp_transport.h"

namespace strata::parallel {

std::string GridShape::str() const {
  return "dp " + std::to_string(dp) + " x pp " + std::to_string(pp) + " x tp " + std::to_string(tp);
}

GridShape make_grid_shape(int world_size, int pp, int tp) {
  if (pp < 1) fail<ConfigError>("pipeline stages (--pp / pipeline { stages }) must be >= 1, got ", pp);
  if (tp < 1) fail<ConfigError>("tensor-parallel size (--tp / tensor { size }) must be >= 1, got ", tp);
  if (world_size < 1) fail<ConfigError>("world size must be >= 1, got ", world_size);
  if (world_size % (pp * tp) != 0) {
    std::string ok;
    for (int n = pp * tp; n <= 8 * pp * tp; n += pp * tp) ok += (ok.empty() ? "" : ", ") + std::to_string(n);
    fail<ConfigError>("cannot arrange ", world_size, " rank(s) as dp x pp ", pp, " x tp ", tp,
                      ": pp x tp = ", pp * tp, " must divide the world size (use ", ok, ", ... ranks)");
  }
  GridShape s;
  s.pp = pp;
  s.tp = tp;
  s.dp = world_size / (pp * tp);
  return s;
}

GridCoord grid_coord(const GridShape& shape, int world_rank) {
  GridCoord c;
  c.tp = world_rank % shape.tp;
  c.pp = (world_rank / shape.tp) % shape.pp;
  c.dp = world_rank / (shape.tp * shape.pp);
  return c;
}

int grid_rank(const GridShape& shape, const GridCoord& c) { return (c.dp * shape.pp + c.pp) * shape.tp + c.tp; }

const char* grid_axis_name(GridAxis axis) {
  switch (axis) {
    case GridAxis::kDp:
      return "dp";
    case GridAxis::kPp:
      return "pp";
    case GridAxis::kTp:
      return "tp";
  }
  return "?";
}

namespace {

int axis_size(const GridShape& s, int axis) { return axis == 0 ? s.dp : axis == 1 ? s.pp : s.tp; }
int axis_coord(const GridCoord& c, int axis) { return axis == 0 ? c.dp : axis == 1 ? c.pp : c.tp; }

// Index of the group this rank belongs to on `axis`: its world rank with the
// axis coordinate set to 0, which is unique per group.
int group_index(const GridShape& s, GridCoord c, int axis) {
  if (axis == 0) c.dp = 0;
  if (axis == 1) c.pp = 0;
  if (axis == 2) c.tp = 0;
  return grid_rank(s, c);
}

}  // namespace

ProcessGrid::ProcessGrid(Communicator& world, GridShape shape, const RankEnv& env, ProcessGridOptions options)
    : world_(world), shape_(shape), env_(env), options_(std::move(options)) {
  if (shape.dp < 1 || shape.pp < 1 || shape.tp < 1 || shape.world() != world.world_size()) {
    fail<ConfigError>("rank ", world.rank(), " on ", env.hostname, ": process grid ", shape.str(), " needs ",
                      shape.world(), " ranks, the world has ", world.world_size());
  }
  coord_ = grid_coord(shape, world.rank());
  for (int axis = 0; axis < 3; ++axis) {
    if (axis_size(shape, axis) == world.world_size() && world.world_size() > 1) {
      axis_[axis] = &world;
      continue;
    }
    owned_[axis] = connect_group(axis, "main");
    axis_[axis] = owned_[axis].get();
  }
}

std::unique_ptr<Communicator> ProcessGrid::new_communicator(GridAxis axis, const std::string& name) {
  STRATA_CHECK(name != "main", "the communicator name 'main' is taken by the grid's own");
  return connect_group(static_cast<int>(axis), name);
}

void ProcessGrid::open_store(const std::string& who) {
  if (options_.store) return;
  if (env_.master_host.empty() || env_.master_port <= 0 || env_.token.empty()) {
    fail<ConfigError>(who, ": the process grid's groups need rank 0's store (STRATA_MASTER, STRATA_TOKEN)");
  }
  options_.store = connect_store(env_.master_host, env_.master_port, env_.token, env_.rank, env_.timeout);
}

std::unique_ptr<Communicator> ProcessGrid::connect_group(int axis, const std::string& name) {
  const int n = axis_size(shape_, axis);
  if (n == 1) return std::make_unique<LocalCommunicator>();
  const CommBackend backend = world_.backend();
  const std::string who = "rank " + std::to_string(world_.rank()) + " on " + env_.hostname;
  if (backend != CommBackend::kTcp && backend != CommBackend::kNccl) {
    fail<ConfigError>(who, ": process grid ", shape_.str(), " over the '", world_.backend_name(), "' backend needs a ",
                      grid_axis_name(static_cast<GridAxis>(axis)),
                      " group communicator, which only the tcp and nccl backends provide so far; use --dp-backend "
                      "tcp (or nccl on GPUs)");
  }
  open_store(who);
  const std::string prefix = std::string("strata/grid/") + grid_axis_name(static_cast<GridAxis>(axis)) + "/" +
                             name + "/" + std::to_string(group_index(shape_, coord_, axis));
  if (backend == CommBackend::kNccl) return connect_nccl_group(axis, prefix);
  TcpTransportOptions topts;
  topts.hostname = env_.hostname;
  topts.advertise_host = options_.advertise_host;
  if (topts.advertise_host.empty() && !env_.master_host.empty()) {
    topts.advertise_host = local_address_towards(env_.master_host, env_.master_port);
  }
  auto transport = connect_tcp_transport(*options_.store, axis_coord(coord_, axis), n, prefix, env_.timeout, topts);
  TcpCommunicatorOptions copts;
  copts.hostname = env_.hostname;
  auto comm = std::make_unique<TcpCommunicator>(std::move(transport), copts);
  comm->hold(options_.store);
  comm->set_timeout(env_.timeout);
  return comm;
}

// A group of a GPU grid: its own NCCL communicator (a unique id of its own,
// through the store under `prefix`), on this rank's GPU; host tensors (the
// strategies' small control messages) are staged through that GPU.
std::unique_ptr<Communicator> ProcessGrid::connect_nccl_group(int axis, const std::string& prefix) {
  if (options_.device.is_cpu()) {
    fail<ConfigError>("rank ", world_.rank(), " on ", env_.hostname, ": process grid ", shape_.str(),
                      " over the nccl backend needs the rank's CUDA device (--device cuda); for a CPU run use "
                      "--dp-backend tcp");
  }
  const int n = axis_size(shape_, axis);
  const int r = axis_coord(coord_, axis);
  RankEnv group = env_;
  group.rank = r;
  group.world_size = n;
  NcclCommunicatorOptions o;
  o.device = options_.device.index;
  o.key = prefix;
  o.who = "rank " + std::to_string(world_.rank()) + " (" + grid_axis_name(static_cast<GridAxis>(axis)) + " rank " +
          std::to_string(r) + " of " + std::to_string(n) + ") on " + env_.hostname;
  o.keep_alive.push_back(options_.store);
  return std::make_unique<DeviceStagingCommunicator>(create_nccl_communicator(group, options_.store, std::move(o)),
                                                     options_.device);
}

ProcessGrid::~ProcessGrid() = default;

std::string ProcessGrid::describe() const {
  std::ostringstream os;
  os << "process grid " << shape_.str() << " (" << shape_.world() << " rank" << (shape_.world() == 1 ? "" : "s")
     << ", tp fastest, then pp, then dp)\n";
  for (int r = 0; r < shape_.world(); ++r) {
    const GridCoord c = grid_coord(shape_, r);
    os << "  rank " << r << ": dp " << c.dp << "  pp " << c.pp << "  tp " << c.tp << "\n";
  }
  return os.str();
}

}  // namespace strata::parallel
