#include "parallel/model_parallel/model_parallel_run.h"

#include <cstdio>
#include <utility>

#include "framework/error.h"
#include "framework/io/file_util.h"
#include "framework/memory_cap.h"
#include "parallel/model_parallel/pipeline_balance.h"
#include "parallel/model_parallel/pipeline_plan.h"

namespace strata::parallel {

namespace {

std::pair<ConfigNode, std::string> net_config_of(const SolverConfig& config) {
  if (config.has_net_param) return {config.net_param, config.base_dir};
  const std::string path = !config.net.empty() ? config.net : config.train_net;
  return {parse_config_file(path), dirname_of(path)};
}

// Rank 0 measures (or models) the layer costs and cuts; every rank gets the cut.
std::vector<int> balanced_cut(const SolverConfig& config, int stages, Communicator& world, std::ostream& out) {
  auto [root, base_dir] = net_config_of(config);
  const int layers = static_cast<int>(train_layer_names(root).size());
  Tensor cut({layers}, DType::kI32);
  if (world.rank() == 0) {
    std::vector<LayerCost> costs;
    std::string how;
    if (memory_cap() > 0) {
      costs = model_layer_costs(root);
      how = "cost model (weight layers per stage; --max-memory is set, so the whole net is not built)";
    } else {
      costs = measure_layer_costs(root, base_dir, 3);
      how = "forward+backward time of each layer, measured over 3 iterations of the whole net on rank 0";
    }
    const std::vector<int> stage = balance_stages(costs, stages);
    for (int i = 0; i < layers; ++i) cut.data<int32_t>()[i] = stage[static_cast<size_t>(i)];
    out << "pipeline stages chosen automatically from the " << how << ":\n" << describe_balance(costs, stage, stages);
    out.flush();
  }
  world.broadcast(cut, 0);
  return std::vector<int>(cut.data<int32_t>(), cut.data<int32_t>() + layers);
}

// Whether any node under `n` is a `split:` key other than NONE (the split
// keys live in the layers' parameter blocks).
bool has_split_key(const ConfigNode& n) {
  for (const ConfigNode& c : n.children()) {
    if (c.is_block()) {
      if (has_split_key(c)) return true;
    } else if (c.key() == "split" && c.as_string() != "NONE") {
      return true;
    }
  }
  return false;
}

// pp x tp ranks are the least a grid needs; one process started by hand
// (no strata launch, mpirun or srun) is the usual way to have fewer.
void check_enough_ranks(const SolverConfig& config, const ModelParallelConfig& mp, const RankEnv& env) {
  const int needed = mp.pipeline.stages * mp.tensor_size;
  if (env.world_size > 1 || env.launcher != "none" || needed <= 1) return;
  std::string flags;
  if (mp.pipeline.stages > 1) flags += " --pp " + std::to_string(mp.pipeline.stages);
  if (mp.tensor_size > 1) flags += " --tp " + std::to_string(mp.tensor_size);
  fail<ConfigError>("pp ", mp.pipeline.stages, " x tp ", mp.tensor_size, " needs at least ", needed,
                    " ranks (one process per pipeline stage and tensor-parallel rank), and this is one process "
                    "started without a launcher. Start the ranks with: strata launch --nproc ", needed,
                    " -- strata train --solver ", config.source, flags,
                    " (plus your other flags; a multiple of ", needed, " ranks adds data parallelism), or under "
                    "mpirun -np ", needed, " / srun -n ", needed);
}

}  // namespace

std::string pipeline_memory_line(int world_rank, const ProcessGrid& grid, PipelineParallel& pipe) {
  const MemoryReport m = pipe.memory_report();
  size_t opt = 0;
  for (const auto& kv : pipe.solver().optimizer().state_tensors()) opt += kv.second.nbytes();
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "rank %d (dp %d, pp %d, tp %d) memory: params %s, grads %s, optimizer state %s, buffers %s, "
                "activations %s (%d micro-batch slot%s); tensor storage in use %s, peak %s",
                world_rank, grid.dp_rank(), grid.pp_rank(), grid.tp_rank(), format_bytes(m.param_bytes).c_str(),
                format_bytes(m.grad_bytes).c_str(), format_bytes(opt).c_str(), format_bytes(m.buffer_bytes).c_str(),
                format_bytes(m.activation_bytes).c_str(), pipe.activation_slots(),
                pipe.activation_slots() == 1 ? "" : "s", format_bytes(memory_in_use()).c_str(),
                format_bytes(memory_peak()).c_str());
  return buf;
}

std::string pipeline_memory_summary(const ModelParallelRun& run, Communicator& world) {
  STRATA_CHECK(run.pipe && run.grid, "pipeline_memory_summary without a pipeline");
  const MemoryReport m = run.pipe->memory_report();
  // The byte counts as 32-bit halves (tensors carry no 64-bit integers).
  constexpr int kFields = 7;
  const uint64_t mine[kFields] = {m.param_bytes,     m.grad_bytes,  m.buffer_bytes,   m.activation_bytes,
                                  m.optimizer_bytes, m.layer_bytes, m.workspace_bytes};
  Tensor in({2 * kFields}, DType::kI32);
  for (int i = 0; i < kFields; ++i) {
    in.data<int32_t>()[2 * i] = static_cast<int32_t>(static_cast<uint32_t>(mine[i]));
    in.data<int32_t>()[2 * i + 1] = static_cast<int32_t>(static_cast<uint32_t>(mine[i] >> 32));
  }
  Tensor all({world.world_size() * 2 * kFields}, DType::kI32);
  world.gather(in, all, 0);
  if (world.rank() != 0) return "";
  const GridShape& shape = run.grid->shape();
  std::string s;
  size_t total = 0;
  for (int stage = 0; stage < shape.pp; ++stage) {
    const int r = grid_rank(shape, GridCoord{0, stage, 0});
    size_t v[kFields];
    for (int i = 0; i < kFields; ++i) {
      const int32_t* p = all.data<int32_t>() + r * 2 * kFields + 2 * i;
      const uint64_t low = static_cast<uint32_t>(p[0]), high = static_cast<uint32_t>(p[1]);
      v[i] = static_cast<size_t>(low | (high << 32));
    }
    const MemoryReport sm{v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
    total += sm.total();
    s += (stage ? "; stage " : "stage ") + std::to_string(stage) + ": " + sm.str();
  }
  return s + "; all stages " + format_bytes(total);
}

ModelParallelRun start_model_parallel(const SolverConfig& config, const ModelParallelConfig& mp, const RankEnv& env,
                                      Communicator* world, SolverOptions& solver_options, std::ostream& out) {
  ModelParallelRun run;
  if (mp.pipeline.stages == 1 && mp.tensor_size == 1) return run;
  check_enough_ranks(config, mp, env);
  LocalCommunicator local;
  Communicator& w = world ? *world : local;
  const GridShape shape = make_grid_shape(w.world_size(), mp.pipeline.stages, mp.tensor_size);
  ProcessGridOptions grid_options;
  grid_options.device = solver_options.device;
  run.grid = std::make_unique<ProcessGrid>(w, shape, env, grid_options);
  ProcessGrid& grid = *run.grid;
  if (w.rank() == 0) out << grid.describe();
  if (w.rank() == 0 && shape.tp > 1 && !has_split_key(net_config_of(config).first)) {
    out << "warning: tp " << shape.tp << ": no layer of the net has a `split:` key, so each tensor-parallel "
        << "group of " << shape.tp << " ranks runs the whole net replicated (every rank holds every parameter "
        << "and does the same work). Mark the layers to split: InnerProduct `split: COLUMN` then `split: ROW`, "
        << "Convolution `split: OUTPUT_CHANNELS`, MultiHeadAttention `split: HEADS` in their parameter blocks "
        << "(docs/config.md, Tensor parallel); or drop --tp and let the ranks run data parallel\n";
  }
  solver_options.rank = grid.dp_rank();
  solver_options.world_size = shape.dp;
  solver_options.comm = &grid.tp();
  if (mp.pipeline.stages == 1) return run;

  PipelineOptions po;
  po.config = mp.pipeline;
  po.device = solver_options.device;
  po.dp_rank = grid.dp_rank();
  po.dp_size = shape.dp;
  po.tp = &grid.tp();
  if (shape.dp > 1) po.dp = &grid.dp();
  // One writer per stage: dp rank 0's pipeline, tp rank 0 of its group.
  po.snapshots = grid.dp_rank() == 0 && grid.tp_rank() == 0 ? SnapshotWriting::kEnabled : SnapshotWriting::kDisabled;
  if (!has_stage_keys(net_config_of(config).first)) po.stage_of_layer = balanced_cut(config, shape.pp, w, out);
  // Over nccl every transfer goes on the pp communicator in batches
  // (StageTransfers::kBatched); elsewhere gradients get a channel of their own.
  if (w.backend() != CommBackend::kNccl) run.grad_comm = grid.new_communicator(GridAxis::kPp, "grad");
  run.pipe = std::make_unique<PipelineParallel>(config, grid.pp(), run.grad_comm ? *run.grad_comm : grid.pp(), po);
  if (w.rank() == 0) {
    out << "pipeline: " << mp.pipeline.summary() << " (theoretical bubble "
        << static_cast<int>(100.0 * theoretical_bubble(shape.pp, mp.pipeline.micro_batches) + 0.5)
        << "%), stages:\n"
        << run.pipe->plan().describe();
    if (run.pipe->has_test_net()) {
      out << "TEST phase every " << config.test_interval
          << " iterations: forward through the stages, the last stage's outputs reported\n";
    }
  }
  out.flush();
  // Every rank reports its own memory, in rank order.
  for (int r = 0; r < w.world_size(); ++r) {
    if (r == w.rank()) {
      out << pipeline_memory_line(w.rank(), grid, *run.pipe) << "\n";
      out.flush();
    }
    w.barrier();
  }
  return run;
}

}  // namespace strata::parallel
