// Weight files and solver snapshots, both in safetensors.
//
// Weights: every parameter and buffer of a Net under its NetParam name
// ("conv1.weight", "bn1.running_mean", or a shared name), f32.
//
// Snapshot of a training run at iteration N, beside each other:
//   <prefix>_iter_<N>.safetensors             the weights, as above
//   <prefix>_iter_<N>.solverstate.safetensors optimizer history ("<param>.<slot>",
//                                             e.g. "fc1.weight.exp_avg") and metadata:
//                                             iteration, solver type, optimizer step
//                                             count, layer states (RNGs, data cursors),
//                                             smoothed-loss window, config fingerprint,
//                                             and the weights file's name.
// Every file is written atomically (temp file + rename), so a crash leaves
// either the previous file or the new one, never half of one.
//
// Tensor parallelism: a parameter that a layer splits over its
// tensor-parallel group (Layer::param_shard) is stored whole, under its
// unsplit name. Saving gathers the blocks (a collective over the group:
// every rank of the group saves, or calls gather_split_params when it
// writes nothing, at the same point); loading slices this rank's block out
// of the full tensor. Files therefore load on any layout, split or not.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "framework/io/safetensors.h"
#include "framework/net.h"
#include "framework/tensor.h"

namespace strata {

using Metadata = std::map<std::string, std::string>;

void save_weights(const Net& net, const std::string& path, const Metadata& metadata = {});

// Each tensor's CRC-32C under "crc32c.<name>" in `md`: what save_weights and
// save_solver_state write, and what load_weights and load_solver_state check
// (IoError naming the tensor). A file written from another file's metadata
// but other tensors takes the metadata without_tensor_checksums().
void add_tensor_checksums(const std::vector<TensorToWrite>& tensors, Metadata& md);
Metadata without_tensor_checksums(const Metadata& md);

// ---- tensor parallelism ----
// True when some layer of the net splits a parameter over > 1 rank.
bool has_split_params(const Net& net);
// The split parameters as full tensors, by index into Net::params()
// (collective over each split layer's group; empty without split parameters).
std::map<int, Tensor> gather_split_params(const Net& net);
// Optimizer history ("<param>.<slot>") of split parameters: gathered into
// full tensors (collective, as above), or sliced from full tensors to this
// rank's block. Other entries are left alone.
void gather_split_history(const Net& net, std::vector<std::pair<std::string, Tensor>>& history);
void slice_split_history(const Net& net, std::vector<std::pair<std::string, Tensor>>& history);

enum class MissingParams { kAllow, kError };
enum class UnexpectedParams { kAllow, kError };

struct LoadOptions {
  // Layers whose parameters are not loaded (they keep their initial values):
  // a new head for a new number of classes. Each must name a layer of the net.
  std::set<std::string> reinit;
  MissingParams missing = MissingParams::kAllow;
  UnexpectedParams unexpected = UnexpectedParams::kAllow;
};

struct LoadReport {
  std::vector<std::string> loaded;        // copied from the file
  std::vector<std::string> missing;       // in the net, not in the file: left as initialised
  std::vector<std::string> unexpected;    // in the file, not in the net: ignored
  std::vector<std::string> mismatched;    // shapes differ, skipped because the layer is in `reinit`
                                          // (without `reinit` a mismatch is a ShapeError)
  std::vector<std::string> reinitialized; // every parameter skipped because of `reinit`
  Metadata metadata;                      // the file's __metadata__
  // Multi-line report for the console ("loaded 8 parameters from x; missing: ...").
  std::string str() const;
};

// Copies tensors into the net's parameters by name. F16 and BF16 files are
// converted to f32. Throws ShapeError listing every shape mismatch, e.g.
//   parameter 'fc8.weight': checkpoint has [1000, 4096], net has [10, 4096];
//   to train this layer from scratch, rename the layer or pass --reinit fc8
// IoError when the file cannot be read, or (with MissingParams::kError /
// UnexpectedParams::kError) when names are missing / left over.
LoadReport load_weights(Net& net, const std::string& path, const LoadOptions& options = {});

// ---- solver snapshots ----

struct SnapshotPaths {
  std::string weights;  // <prefix>_iter_<N>.safetensors
  std::string state;    // <prefix>_iter_<N>.solverstate.safetensors
};
SnapshotPaths snapshot_paths(const std::string& prefix, int64_t iter);
// ".../x.solverstate.safetensors" -> ".../x.safetensors" (the naming convention above).
std::string weights_path_for_state(const std::string& state_path);

// Everything besides the weights that a bit-exact resume needs.
struct SolverState {
  int64_t iter = 0;
  std::string solver_type;        // solver_type_name()
  int64_t optimizer_steps = 0;
  std::vector<std::pair<std::string, Tensor>> history;   // "<param>.<slot>", f32
  std::map<std::string, std::string> layer_states;       // TRAIN net, by layer name
  std::map<std::string, std::string> test_layer_states;  // TEST net (data cursor)
  std::vector<float> loss_window;  // recent losses, oldest first (display smoothing)
  std::string config_fingerprint;
  // SolverConfig::training_settings() as written (empty in older snapshots),
  // so a resume can name the settings that changed.
  std::vector<std::pair<std::string, std::string>> settings;
  std::string weights_file;        // base name of the weights file, in the same folder
};

void save_solver_state(const std::string& path, const SolverState& state);
// IoError when the file is not a strata solver state or is corrupt.
SolverState load_solver_state(const std::string& path);
// The iteration a state file was written at, from its metadata alone (the
// tensors are neither read nor checked); IoError as above.
int64_t solver_state_iter(const std::string& path);

}  // namespace strata
