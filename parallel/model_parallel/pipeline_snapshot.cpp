#include "parallel/model_parallel/pipeline.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <unistd.h>
#include <utility>

#include "framework/io/checkpoint.h"
#include "framework/error.h"
#include "framework/io/file_util.h"
#include "framework/io/safetensors.h"
#include "framework/io/wire_format.h"

#include "parallel/model_parallel/pipeline_internal.h"

namespace strata::parallel {

using namespace pipeline_internal;

namespace {

// The snapshot messages between ranks: framework/io/wire_format.h fields.
using wire::put_bytes;
using wire::put_u64;

enum Record : uint64_t { kWeight = 0, kHistory = 1, kLayerState = 2 };

void put_tensor(std::string& out, uint64_t kind, const std::string& name, const Tensor& t) {
  put_u64(out, kind);
  put_bytes(out, name.data(), name.size());
  put_u64(out, t.shape().size());
  for (int64_t d : t.shape()) put_u64(out, static_cast<uint64_t>(d));
  const Tensor host = t.to(Device::cpu());  // parameters and history may live on a GPU
  put_bytes(out, host.raw_data(), host.nbytes());
}

}  // namespace

// Every stage's parameters, history and layer states go to stage 0.
void PipelineParallel::gather_snapshot(SolverState& st) {
  const bool writer = options_.snapshots == SnapshotWriting::kEnabled;
  // Layer states with full-net names: the compute net's own layers and the
  // feeder's data layers (not the pipeline's Input layers).
  std::map<std::string, std::string> states;
  for (const auto& [name, value] : slots_[0]->save_layer_states()) {
    if (name.rfind("pipeline_", 0) != 0) states[name] = value;
  }
  std::map<std::string, std::string> data_states;  // the feeder's data layers
  if (feeder_) {
    for (const auto& [name, value] : feeder_->save_layer_states()) {
      if (name.rfind("pipeline_", 0) != 0) data_states[name] = value;
    }
    states.insert(data_states.begin(), data_states.end());
  }
  // Data-parallel pipelines: each dp rank's data cursors go to dp rank 0 as
  // "@rank<r>/<layer>" (as DataParallel keeps them), so that every rank
  // resumes its own shard.
  if (feeder_ && dp_ && dp_->world_size() > 1) {
    if (dp_->rank() != 0) {
      std::string msg;
      for (const auto& [name, value] : data_states) {
        put_bytes(msg, name.data(), name.size());
        put_bytes(msg, value.data(), value.size());
      }
      Tensor len({1}, DType::kI32);
      len.data<int32_t>()[0] = static_cast<int32_t>(msg.size());
      dp_->send(len, 0, kSnapshotTag);
      Tensor body({std::max<int64_t>(1, static_cast<int64_t>(msg.size()))}, DType::kU8);
      if (!msg.empty()) std::memcpy(body.raw_data(), msg.data(), msg.size());
      dp_->send(body, 0, kSnapshotTag);
    } else {
      for (int r = 1; r < dp_->world_size(); ++r) {
        Tensor len({1}, DType::kI32);
        dp_->recv(len, r, kSnapshotTag);
        Tensor body({std::max<int64_t>(1, len.data<int32_t>()[0])}, DType::kU8);
        dp_->recv(body, r, kSnapshotTag);
        const std::string msg(static_cast<const char*>(body.raw_data()), static_cast<size_t>(len.data<int32_t>()[0]));
        wire::Reader in(msg, "the data cursors of dp rank " + std::to_string(r));
        while (!in.done()) {
          const std::string name = in.bytes();
          states[rank_state_prefix(r) + name] = in.bytes();
        }
      }
    }
  }
  // Tensor parallelism: whole tensors in the file (the history in `st` was
  // gathered by the Solver's capture_state). gather_split_params is a
  // collective over the stage's tp group: the Solver calls it once more
  // after this hook on every rank whose Solver writes no files (every rank
  // of stages > 0, and the non-writers of stage 0), so on stages > 0 all
  // ranks call it here too, and on stage 0 only the writer (whose Solver
  // does not).
  std::map<int, Tensor> full;
  if (writer || stage_ != 0) full = gather_split_params(*slots_[0]);
  if (!writer) return;  // another pipeline (dp rank > 0) or tp rank writes
  const std::vector<NetParam>& params = slots_[0]->params();
  auto whole = [&](int i) -> const Tensor& {
    auto it = full.find(i);
    return it != full.end() ? it->second : params[static_cast<size_t>(i)].blob->data;
  };
  if (stage_ != 0) {
    std::string msg;
    for (int i = 0; i < static_cast<int>(params.size()); ++i) put_tensor(msg, kWeight, params[i].name, whole(i));
    for (const auto& [name, t] : st.history) put_tensor(msg, kHistory, name, t);
    for (const auto& [name, value] : states) {
      put_u64(msg, kLayerState);
      put_bytes(msg, name.data(), name.size());
      put_bytes(msg, value.data(), value.size());
    }
    Tensor len({1}, DType::kI32);
    len.data<int32_t>()[0] = static_cast<int32_t>(msg.size());
    STRATA_CHECK(msg.size() < (size_t{1} << 31), "pipeline snapshot message over 2 GiB");
    Tensor body({static_cast<int64_t>(msg.size())}, DType::kU8);
    if (!msg.empty()) std::memcpy(body.raw_data(), msg.data(), msg.size());
    const auto what = [] { return std::string("snapshot: send this stage's parameters and state to stage 0"); };
    waiting_for(what, [&] {
      act_.send(len, 0, kSnapshotTag);
      act_.send(body, 0, kSnapshotTag);
    });
    return;
  }
  snapshot_weights_.clear();
  std::set<std::string> names;
  for (int i = 0; i < static_cast<int>(params.size()); ++i) {
    if (names.insert(params[i].name).second) snapshot_weights_.emplace_back(params[i].name, whole(i).to(Device::cpu()));
  }
  // Keep the Solver's "@world_size" (the dp size): a resume with another
  // number of data-parallel ranks then restarts the data order.
  auto ws = st.layer_states.find(kWorldSizeStateKey);
  const std::string world_size = ws == st.layer_states.end() ? "" : ws->second;
  st.layer_states.clear();
  for (auto& kv : states) st.layer_states.insert(kv);
  // The TEST data layers' cursors (stage 0's: where the data layers are).
  st.test_layer_states.clear();
  if (test_feeder_) {
    for (const auto& [name, value] : test_feeder_->save_layer_states()) {
      if (name.rfind("pipeline_", 0) != 0) st.test_layer_states[name] = value;
    }
  }
  if (!world_size.empty()) st.layer_states[kWorldSizeStateKey] = world_size;
  for (int s = 1; s < plan_.stages; ++s) {
    Tensor len({1}, DType::kI32);
    Tensor body;
    const auto what = [&] { return "snapshot: receive the parameters and state of stage " + std::to_string(s); };
    waiting_for(what, [&] {
      act_.recv(len, s, kSnapshotTag);
      body = Tensor({len.data<int32_t>()[0]}, DType::kU8);
      act_.recv(body, s, kSnapshotTag);
    });
    const std::string msg(static_cast<const char*>(body.raw_data()), body.nbytes());
    wire::Reader in(msg, "the pipeline snapshot message of stage " + std::to_string(s));
    while (!in.done()) {
      const uint64_t kind = in.u64();
      const std::string name = in.bytes();
      if (kind == kLayerState) {
        st.layer_states[name] = in.bytes();
        continue;
      }
      Shape shape(in.u64());
      for (auto& d : shape) d = static_cast<int64_t>(in.u64());
      const std::string data = in.bytes();
      Tensor t(shape);
      STRATA_CHECK(data.size() == t.nbytes(), "pipeline snapshot: '", name, "' has ", data.size(), " bytes");
      if (!data.empty()) std::memcpy(t.raw_data(), data.data(), data.size());
      if (kind == kWeight) {
        if (names.insert(name).second) snapshot_weights_.emplace_back(name, std::move(t));
      } else {
        st.history.emplace_back(name, std::move(t));
      }
    }
  }
}

void PipelineParallel::write_weights(const std::string& path, const Metadata& md) {
  std::vector<TensorToWrite> tensors;
  for (const auto& [name, t] : snapshot_weights_) tensors.push_back({name, DType::kF32, t.shape(), t.raw_data()});
  // The same metadata as save_weights of the unsplit net: the files are alike.
  Metadata m = md;
  m.emplace("format", "strata");
  m.emplace("net", solver_->net().name());
  add_tensor_checksums(tensors, m);
  write_safetensors(path, tensors, m);
}

// The snapshot names every parameter of the whole net; this stage writes
// its own parameters and their history into a private snapshot pair and
// restores that with Solver::restore (which checks names and shapes, and
// restores the iteration, loss window and layer states).
ResumeInfo PipelineParallel::restore(const std::string& state_path) {
  SolverState st = load_solver_state(state_path);
  std::string weights = join_path(dirname_of(state_path), st.weights_file);
  if (st.weights_file.empty() || !file_exists(weights)) weights = weights_path_for_state(state_path);
  if (!file_exists(weights)) {
    fail<IoError>(state_path, ": the snapshot's weights file ", weights, " does not exist; it must lie beside the "
                  "state file");
  }
  SafetensorsReader reader(weights);
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const NetParam& p : slots_[0]->params()) {
    if (seen.insert(p.name).second) names.push_back(p.name);
  }
  std::vector<TensorToWrite> tensors;
  std::vector<std::string> missing;
  for (const std::string& name : names) {
    const TensorView* v = reader.find(name);
    if (!v) {
      missing.push_back(name);
      continue;
    }
    tensors.push_back({name, v->dtype, v->shape, v->data});
  }
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    fail<ConfigError>(state_path, ": pipeline stage ", stage_, " needs parameters that ", weights,
                      " does not hold: ", list, "; was it written for another net?");
  }
  std::set<std::string> own_history;
  for (const auto& kv : solver_->optimizer().state_tensors()) own_history.insert(kv.first);
  std::vector<std::pair<std::string, Tensor>> history;
  for (auto& kv : st.history) {
    if (own_history.count(kv.first)) history.push_back(std::move(kv));
  }
  st.history = std::move(history);
  const std::map<std::string, std::string> all_states = st.layer_states;
  const std::map<std::string, std::string> test_states = st.test_layer_states;

  namespace fs = std::filesystem;
  // Unique per call: ranks may be threads of one process (tests).
  static std::atomic<int> calls{0};
  const fs::path dir = fs::temp_directory_path() / ("strata_pipeline_resume_" + std::to_string(::getpid()) + "_" +
                                                    std::to_string(calls++));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail<IoError>("cannot create temporary folder '", dir.string(), "': ", ec.message());
  const std::string base = fs::path(state_path).filename().string();
  const std::string stage_state = (dir / base).string();
  st.weights_file = base + ".weights.safetensors";
  ResumeInfo info;
  try {
    Metadata md = without_tensor_checksums(reader.metadata());
    add_tensor_checksums(tensors, md);
    write_safetensors((dir / st.weights_file).string(), tensors, md);
    save_solver_state(stage_state, st);
    info = solver_->restore(stage_state);
  } catch (...) {
    fs::remove_all(dir, ec);
    throw;
  }
  fs::remove_all(dir, ec);
  info.state_path = state_path;
  info.weights_path = weights;
  // The data layers live in the feeders, under their own names: dp rank 0
  // takes the plain entries, dp rank r its "@rank<r>/" ones. With another
  // number of pipelines the data order restarts.
  const bool same_world = info.snapshot_world_size == options_.dp_size;
  auto mine = [&](const std::map<std::string, std::string>& states) {
    std::map<std::string, std::string> out;
    const std::string prefix = rank_state_prefix(options_.dp_rank);
    for (const auto& [name, value] : states) {
      if (options_.dp_rank == 0 && !name.empty() && name[0] != '@') out[name] = value;
      if (options_.dp_rank != 0 && name.rfind(prefix, 0) == 0) out[name.substr(prefix.size())] = value;
    }
    return out;
  };
  if (feeder_) {
    const std::map<std::string, std::string> own = mine(all_states);
    if (same_world && !own.empty()) {
      feeder_->load_layer_states(own);
    } else {
      for (int i : plan_.sources(stage_)) {
        auto it = all_states.find(plan_.layers[i].name);
        info.data_order_restarted |= it != all_states.end() && !it->second.empty();
      }
    }
  }
  // Only dp rank 0's TEST cursors are kept; other pipelines start theirs afresh.
  if (test_feeder_ && same_world && options_.dp_rank == 0) test_feeder_->load_layer_states(mine(test_states));
  return info;
}

}  // namespace strata::parallel
