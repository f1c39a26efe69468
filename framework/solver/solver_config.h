// The solver prototxt: what to train, how, and for how long. Caffe's
// spelling is accepted as written (type: "Adam", legacy solver_type: ADAM,
// lr_policy: "step", stepvalue repeated, ...). Unknown keys are ConfigErrors
// naming the nearest known key; every value is validated with a message that
// names the key and its file:line:col.
//
// Relative paths: net, train_net and test_net are looked up in the working
// directory first, as Caffe does (its files are run from the Caffe root),
// then beside the solver file (framework/io/input_path.h); snapshot_prefix
// and log are relative to where the net was found (the working directory for
// a Caffe-layout run, the solver's folder otherwise).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/solver/finetune_policy.h"
#include "framework/solver/lr_policy.h"
#include "framework/config/net_spec.h"
#include "framework/net.h"
#include "framework/solver/optimizer.h"

namespace strata {

enum class SolverMode { kCPU, kGPU };
// How a run computes and stores (docs/config.md, "precision"): FP32
// everywhere; TF32 tensor-core GEMMs and convolutions (CUDA only); BF16
// tensor-core GEMMs on a GPU, and activations and their gradients stored in
// bf16 (NetOptions::storage_dtype) on the GPU and the CPU; FP16 the same
// with f16 storage plus dynamic loss scaling. Master weights and optimizer
// state stay f32 in every mode; on the CPU the math is f32 in every mode.
enum class Precision { kFP32, kTF32, kBF16, kFP16 };
const char* precision_name(Precision p);
// The dtype a precision stores activations and their gradients in: bf16 for
// BF16, f16 for FP16, f32 otherwise.
DType storage_dtype_of(Precision p);
// What a step whose loss or gradients are not finite (inf/NaN) does:
// stop the run with an error naming the layer (default), or skip the update.
enum class NonFiniteAction { kStop, kSkip };

enum class SnapshotAfterTrain { kNo, kYes };

// When the host reads a step's loss and its decision (apply, skip, the FP16
// loss scale): after every step, or one step later while the device already
// runs the next (framework/solver/step_ledger.h). AUTO: one step later on a
// GPU without a multi-rank strategy, every step otherwise. The same weights either way.
enum class StepResults { kAuto, kEachStep, kOneStepLater };

// Whether training steps are captured once as CUDA graphs and replayed
// (framework/solver/step_graph.h). AUTO: on a GPU, where the step allows it
// (results read one step later, no strategy attached, every layer replays),
// else eagerly with a notice saying why. ON: the same, but a step that cannot
// be captured is an error (on the CPU: the graph's split step runs eagerly).
// OFF: never. The same weights in all three.
enum class StepGraphMode { kAuto, kOn, kOff };

// Which way a snapshot_best metric improves.
enum class BestIs { kHigher, kLower };

struct SolverConfig {
  // ---- nets: either `net` (both phases from one file), an inline
  // `net_param { }`, or `train_net` (+ optional `test_net`) ----
  std::string net;          // resolved path, or empty
  ConfigNode net_param;     // inline net (used when has_net_param)
  bool has_net_param = false;
  std::string train_net;    // resolved path, or empty
  std::string test_net;     // resolved path, or empty
  // Net files found in neither place (resolved path -> a message naming the
  // key, its line and both places tried); the Solver raises it when it
  // opens the file, so that a config can be parsed before its nets exist.
  std::map<std::string, std::string> not_found;
  // Caffe's train_state / test_state: level and stages (and a phase, when
  // given) the TRAIN and TEST nets are built in; with several test_state
  // blocks (one per Caffe test net) the first is used.
  NetStateSpec train_state;
  NetStateSpec test_state;

  // ---- testing ----
  int64_t test_iter = 0;        // batches per test (first `test_iter` if repeated)
  int64_t test_interval = 0;    // 0: never test
  bool test_initialization = true;
  bool test_compute_loss = false;  // accepted for Caffe files; outputs are always reported

  // ---- schedule and update rule ----
  int64_t max_iter = 0;
  int64_t iter_size = 1;
  LrSchedule lr;               // base_lr, lr_policy, gamma, power, stepsize, stepvalue,
                               // min_lr, warmup_iter, warmup_start_factor (max_iter copied in)
  OptimizerOptions optimizer;  // type, momentum, momentum2, delta, weight_decay, regularization_type
  double clip_gradients = -1;  // <= 0: off
  NonFiniteAction nonfinite = NonFiniteAction::kStop;
  FinetunePolicy finetune;     // layer_decay, no_weight_decay (framework/solver/finetune_policy.h)

  // ---- reporting and snapshots ----
  int64_t display = 100;       // 0: no progress lines
  int64_t average_loss = 1;    // displayed loss = mean of the last average_loss iterations
  int64_t snapshot = 0;        // interval; 0: only after training / on interrupt
  std::string snapshot_prefix; // resolved; default: the solver file's path without extension
  SnapshotAfterTrain snapshot_after_train = SnapshotAfterTrain::kYes;
  int64_t snapshot_keep = 0;   // keep the newest this many periodic snapshots; 0: all
  // A TEST net output (e.g. "accuracy"): a snapshot is written whenever it
  // reaches a new best, and snapshot_keep never removes the best one.
  std::string snapshot_best;
  BestIs snapshot_best_is = BestIs::kHigher;
  std::string log;             // JSON-lines log; default "<snapshot_prefix>_log.jsonl"

  // ---- run ----
  uint64_t random_seed = 1;
  // GPU: `strata train` without --device trains on CUDA device device_id
  // when the build and the machine have one, and on the CPU with one notice
  // when not. --device always wins.
  SolverMode solver_mode = SolverMode::kCPU;
  int64_t device_id = 0;
  Precision precision = Precision::kFP32;
  double initial_loss_scale = 65536;       // FP16 only
  int64_t loss_scale_growth_interval = 2000;  // FP16 only: good steps before the scale doubles
  bool debug_info = false;     // accepted, ignored
  // blob_memory: BY_LIFETIME (the default: values and gradients share one
  // arena by lifetime), SEPARATE (each its own, Caffe's layout) or
  // BY_LIFETIME_CHECKED (no sharing; NaN into each buffer after its last use). The
  // training net's; results are the same bits in all three.
  BlobMemory blob_memory = BlobMemory::kByLifetime;
  // fuse_epilogues: an in-place ReLU applied by the InnerProduct or
  // Convolution before it (NetOptions::fuse_epilogues); the same bits either way.
  bool fuse_epilogues = true;
  // channels_last: image blobs between the convolutions stored NHWC
  // (NetOptions::channels_last); off by default.
  bool channels_last = false;
  StepResults step_results = StepResults::kAuto;
  StepGraphMode step_graph = StepGraphMode::kAuto;

  // ---- multi-process training ----
  // The `parallel { data { ... } }` block as written (empty when absent). The
  // framework does not read it: parallel/data_parallel/data_parallel_config.h parses and
  // checks it (tools do so in every run, so mistakes show up on one process too).
  ConfigNode parallel;

  // Lines for the user about how the file was read (a net path found in the
  // working directory while another file of that name lies beside the
  // solver; test nets beyond the first). `strata train` prints them.
  std::vector<std::string> notices;

  std::string source;          // the solver file ("" when parsed from text without a name)
  std::string base_dir;        // the folder relative paths resolved against

  // Hash (16 hex digits) of the settings that change the training trajectory
  // (update rule, schedule, iter_size, seed, nets). Stored in snapshots so a
  // resume can tell the user the settings changed since.
  std::string fingerprint() const;
  // The settings the fingerprint covers, as (key, value) in a fixed order:
  // kept in solver states so a resume can say which of them changed.
  std::vector<std::pair<std::string, std::string>> training_settings() const;
  // Human summary of the settings for logs.
  std::string summary() const;
};

// Every key a solver file may contain.
const std::vector<std::string>& solver_keys();

// Reads and validates a parsed solver file. `source` names the solver file
// (it provides the base folder and the default snapshot prefix).
SolverConfig parse_solver_config(const ConfigNode& root, const std::string& source);
// parse_config_file + parse_solver_config.
SolverConfig load_solver_config(const std::string& path);

// "base_lr 0.01 -> 0.02, momentum 0.9 -> 0.95": the settings that differ
// ("" when none). Long values (the inline net) are shown by their length.
std::string describe_settings_change(const std::vector<std::pair<std::string, std::string>>& before,
                                     const std::vector<std::pair<std::string, std::string>>& now);

}  // namespace strata
