#include "framework/solver/solver_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

#include "framework/error.h"
#include "framework/hash.h"
#include "framework/io/file_util.h"
#include "framework/io/input_path.h"

namespace strata {

const std::vector<std::string>& solver_keys() {
  static const std::vector<std::string> keys = {
      "net", "net_param", "train_net", "test_net",
      "test_iter", "test_interval", "test_initialization", "test_compute_loss",
      "base_lr", "display", "max_iter", "iter_size", "average_loss",
      "lr_policy", "gamma", "power", "stepsize", "stepvalue", "min_lr", "warmup_iter", "warmup_start_factor",
      "type", "solver_type", "momentum", "momentum2", "delta", "weight_decay", "regularization_type",
      "clip_gradients", "nonfinite", "layer_decay", "no_weight_decay",
      "snapshot", "snapshot_prefix", "snapshot_after_train", "snapshot_keep", "snapshot_best", "snapshot_best_mode", "snapshot_format", "log",
      "random_seed", "solver_mode", "device_id", "debug_info", "parallel", "train_state", "test_state", "rms_decay",
      "precision", "initial_loss_scale", "loss_scale_growth_interval", "blob_memory", "fuse_epilogues", "step_results",
      "step_graph", "channels_last"};
  return keys;
}

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// "solver.prototxt:7:1" for a key, or the file itself when the key is absent.
std::string loc_of(const ConfigNode& root, const std::string& key) {
  const ConfigNode* n = root.find(key);
  return n ? n->loc().str() : root.loc().str();
}

template <typename... Args>
[[noreturn]] void bad(const ConfigNode& root, const std::string& key, Args&&... args) {
  fail<ConfigError>(loc_of(root, key), ": ", key, " ", std::forward<Args>(args)...);
}

std::string resolve(const std::string& base_dir, const std::string& path) {
  return path.empty() ? path : join_path(base_dir, path);
}

// The solver file's path without its extension: Caffe's default snapshot prefix.
std::string strip_extension(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return path;
  return path.substr(0, dot);
}

SolverType parse_type(const ConfigNode& root) {
  const std::vector<std::string>& names = solver_type_names();
  bool have = false;
  SolverType type = SolverType::kSGD;
  if (const ConfigNode* n = root.find("type")) {
    // Caffe's spelling (AdaGrad, RMSProp), in any case.
    const std::string text = n->as_string();
    bool found = false;
    for (size_t i = 0; i < names.size(); ++i) {
      if (lower(names[i]) == lower(text)) type = static_cast<SolverType>(i), found = true;
    }
    if (!found) n->as_enum(names);  // throws, naming the nearest type
    have = true;
  }
  if (const ConfigNode* n = root.find("solver_type")) {
    // Caffe's legacy enum.
    const std::string v = n->as_enum({"SGD", "NESTEROV", "ADAGRAD", "RMSPROP", "ADADELTA", "ADAM"});
    const SolverType legacy = v == "SGD"        ? SolverType::kSGD
                              : v == "NESTEROV" ? SolverType::kNesterov
                              : v == "ADAGRAD"  ? SolverType::kAdaGrad
                              : v == "RMSPROP"  ? SolverType::kRMSProp
                              : v == "ADADELTA" ? SolverType::kAdaDelta
                                                : SolverType::kAdam;
    if (have && legacy != type) {
      fail<ConfigError>(n->loc().str(), ": solver_type ", v, " contradicts type: \"", solver_type_name(type),
                        "\"; give only one of them");
    }
    type = legacy;
  }
  return type;
}

void check_range(const ConfigNode& root, const std::string& key, double v, double lo, double hi,
                 bool hi_inclusive, const char* meaning) {
  const bool ok = v >= lo && (hi_inclusive ? v <= hi : v < hi);  // false for NaN
  if (!ok) {
    bad(root, key, "must be in [", lo, ", ", hi, hi_inclusive ? "]" : ")", ", got ", v, meaning);
  }
}

}  // namespace

SolverConfig parse_solver_config(const ConfigNode& root, const std::string& source) {
  root.check_keys(solver_keys(), "solver" + (source.empty() ? std::string() : " file " + source));
  SolverConfig c;
  c.source = source;
  c.base_dir = dirname_of(source);

  // ---- nets ----
  const bool has_net = root.has("net");
  c.has_net_param = root.has("net_param");
  const bool has_train = root.has("train_net");
  const int given = int{has_net} + int{c.has_net_param} + int{has_train};
  if (given == 0) {
    fail<ConfigError>(root.loc().str(), ": the solver names no net; add net: \"train_val.prototxt\" "
                      "(or train_net: and test_net:)");
  }
  if (given > 1) {
    fail<ConfigError>(root.loc().str(), ": give exactly one of net, net_param and train_net");
  }
  // Caffe's rule first (the working directory), then beside the solver.
  bool nets_in_working_directory = false;
  auto net_path = [&](const char* key) -> std::string {
    const std::string written = root.get_string(key, "");
    if (written.empty()) return written;
    const InputPath found = find_input_path(written, c.base_dir);
    if (found.found == FoundIn::kWorkingDirectory) {
      nets_in_working_directory = true;
      if (!found.shadowed.empty()) {
        c.notices.push_back(loc_of(root, key) + ": " + key + " '" + written +
                            "' is read from the working directory, as Caffe does; the different file '" +
                            found.shadowed + "' beside the solver is not used");
      }
    }
    if (found.found == FoundIn::kNowhere) {
      c.not_found[found.path] =
          loc_of(root, key) + ": " + key + " '" + written + "' not found; tried " +
          input_path_places(written, c.base_dir) +
          ". Run from the folder the path starts from (for Caffe's own files, the Caffe root), or write the "
          "path relative to the solver file";
    }
    return found.path;
  };
  c.net = net_path("net");
  if (c.has_net_param) c.net_param = root.block("net_param");
  c.train_net = net_path("train_net");
  if (root.count("test_net") > 1) {
    fail<ConfigError>(root.all("test_net")[1]->loc().str(), ": only one test_net is supported");
  }
  c.test_net = net_path("test_net");
  if (!c.test_net.empty() && !has_train) {
    bad(root, "test_net", "needs train_net: (with net: the TEST phase of the same file is used)");
  }

  // ---- net states (Caffe's NetState: phase, level, stage) ----
  if (root.count("train_state") > 1) bad(root, "train_state", "is given ", root.count("train_state"), " times; give it once");
  if (root.has("train_state")) c.train_state = parse_net_state(root.block("train_state"), "train_state of the solver");
  const std::vector<const ConfigNode*> test_states = root.all("test_state");
  for (const ConfigNode* t : test_states) parse_net_state(*t, "test_state of the solver");  // all checked
  if (!test_states.empty()) c.test_state = parse_net_state(*test_states.front(), "test_state of the solver");

  // ---- testing ----
  const std::vector<int64_t> test_iters = root.get_ints("test_iter");
  if (test_states.size() > 1) {
    std::string stages;
    for (const std::string& st : c.test_state.stages) stages += (stages.empty() ? "" : ", ") + st;
    c.notices.push_back(test_states[1]->loc().str() + ": this solver defines " + std::to_string(test_states.size()) +
                        " test nets (one per test_state); strata tests the first only (" +
                        (stages.empty() ? std::string("no stage") : "stage " + stages) + ", test_iter " +
                        std::to_string(test_iters.empty() ? 0 : test_iters.front()) + ")");
  }
  c.test_iter = test_iters.empty() ? 0 : test_iters.front();
  c.test_interval = root.get_int("test_interval", 0);
  c.test_initialization = root.get_bool("test_initialization", true);
  c.test_compute_loss = root.get_bool("test_compute_loss", false);
  if (c.test_iter < 0) bad(root, "test_iter", "must be >= 0, got ", c.test_iter);
  if (c.test_interval < 0) bad(root, "test_interval", "must be >= 0 (0: never test), got ", c.test_interval);
  const bool has_test_net = has_net || c.has_net_param || !c.test_net.empty();
  if (c.test_interval > 0 && has_test_net && c.test_iter <= 0) {
    bad(root, "test_interval", "is ", c.test_interval,
        " but test_iter (batches per test) is not set; add test_iter: N or set test_interval: 0");
  }

  // ---- schedule ----
  c.max_iter = root.get_int("max_iter", 0);
  if (c.max_iter < 0) bad(root, "max_iter", "must be >= 0, got ", c.max_iter);
  c.iter_size = root.get_int("iter_size", 1);
  if (c.iter_size < 1) bad(root, "iter_size", "must be >= 1 (batches accumulated per update), got ", c.iter_size);

  LrSchedule& lr = c.lr;
  if (!root.has("base_lr")) fail<ConfigError>(root.loc().str(), ": missing required key base_lr");
  lr.base_lr = root.get_double("base_lr");
  if (!(lr.base_lr > 0.0) || !std::isfinite(lr.base_lr)) bad(root, "base_lr", "must be > 0, got ", lr.base_lr);
  lr.policy = parse_lr_policy(root.get_enum("lr_policy", lr_policy_names(), "fixed"));
  lr.max_iter = c.max_iter;
  const std::string policy = lr_policy_name(lr.policy);
  auto require = [&](const char* key) {
    if (!root.has(key)) {
      fail<ConfigError>(loc_of(root, "lr_policy"), ": lr_policy \"", policy, "\" needs ", key);
    }
  };
  const bool uses_gamma = lr.policy == LrPolicy::kStep || lr.policy == LrPolicy::kMultiStep ||
                          lr.policy == LrPolicy::kExp || lr.policy == LrPolicy::kInv ||
                          lr.policy == LrPolicy::kSigmoid;
  if (uses_gamma) require("gamma");
  lr.gamma = root.get_double("gamma", 0.1);
  if (uses_gamma && !std::isfinite(lr.gamma)) bad(root, "gamma", "must be finite, got ", lr.gamma);
  if (lr.policy == LrPolicy::kInv || lr.policy == LrPolicy::kPoly) require("power");
  lr.power = root.get_double("power", 1.0);
  if (!std::isfinite(lr.power)) bad(root, "power", "must be finite, got ", lr.power);
  lr.stepsize = root.get_int("stepsize", 0);
  if (lr.policy == LrPolicy::kStep) {
    require("stepsize");
    if (lr.stepsize <= 0) bad(root, "stepsize", "must be > 0 for lr_policy \"step\", got ", lr.stepsize);
  }
  lr.stepvalues = root.get_ints("stepvalue");
  if (lr.policy == LrPolicy::kMultiStep) {
    require("stepvalue");
    for (size_t i = 0; i < lr.stepvalues.size(); ++i) {
      if (lr.stepvalues[i] < 0 || (i > 0 && lr.stepvalues[i] <= lr.stepvalues[i - 1])) {
        fail<ConfigError>(root.all("stepvalue")[i]->loc().str(),
                          ": stepvalue values must be >= 0 and strictly increasing, got ", lr.stepvalues[i],
                          i > 0 ? " after " + std::to_string(lr.stepvalues[i - 1]) : std::string());
      }
    }
  }
  if ((lr.policy == LrPolicy::kPoly || lr.policy == LrPolicy::kCosine) && c.max_iter <= 0) {
    bad(root, "max_iter", "must be > 0 for lr_policy \"", policy, "\" (the schedule spans max_iter)");
  }
  lr.min_lr = root.get_double("min_lr", 0.0);
  if (!(lr.min_lr >= 0.0 && lr.min_lr <= lr.base_lr)) {
    bad(root, "min_lr", "must be in [0, base_lr = ", lr.base_lr, "], got ", lr.min_lr);
  }
  lr.warmup_iter = root.get_int("warmup_iter", 0);
  if (lr.warmup_iter < 0) bad(root, "warmup_iter", "must be >= 0, got ", lr.warmup_iter);
  lr.warmup_start_factor = root.get_double("warmup_start_factor", 0.0);
  check_range(root, "warmup_start_factor", lr.warmup_start_factor, 0.0, 1.0, true,
              " (the fraction of the rate at iteration 0)");

  // ---- update rule ----
  OptimizerOptions& o = c.optimizer;
  o.type = parse_type(root);
  const bool adam = o.type == SolverType::kAdam || o.type == SolverType::kAdamW;
  // Caffe's Adam reads beta1 from `momentum`; PyTorch's default beta1 is 0.9.
  o.momentum = root.get_double("momentum", adam ? 0.9 : 0.0);
  check_range(root, "momentum", o.momentum, 0.0, 1.0, false,
              adam ? " (Adam's beta1)" : o.type == SolverType::kAdaDelta ? " (AdaDelta's decay of its averages)" : "");
  if ((o.type == SolverType::kAdaGrad || o.type == SolverType::kRMSProp) && o.momentum != 0.0) {
    // Caffe refuses it too ("Momentum cannot be used with AdaGrad").
    bad(root, "momentum", "cannot be used with ", solver_type_name(o.type), " (got ", o.momentum,
        "); remove it or set it to 0");
  }
  o.rms_decay = root.get_double("rms_decay", 0.99);
  check_range(root, "rms_decay", o.rms_decay, 0.0, 1.0, true, " (RMSProp's decay of the mean square)");

  o.momentum2 = root.get_double("momentum2", 0.999);
  check_range(root, "momentum2", o.momentum2, 0.0, 1.0, false, " (Adam's beta2)");
  o.delta = root.get_double("delta", 1e-8);
  if (!(o.delta > 0.0) || !std::isfinite(o.delta)) bad(root, "delta", "must be > 0, got ", o.delta);
  o.weight_decay = root.get_double("weight_decay", 0.0);
  if (!(o.weight_decay >= 0.0) || !std::isfinite(o.weight_decay)) {
    bad(root, "weight_decay", "must be >= 0, got ", o.weight_decay);
  }
  o.regularization = root.get_enum("regularization_type", {"L2", "L1"}, "L2") == "L1" ? Regularization::kL1
                                                                                   : Regularization::kL2;
  if (o.regularization == Regularization::kL1 && o.type == SolverType::kAdamW) {
    bad(root, "regularization_type", "L1 cannot be used with AdamW, whose weight decay is decoupled L2");
  }
  c.clip_gradients = root.get_double("clip_gradients", -1.0);
  if (std::isnan(c.clip_gradients)) bad(root, "clip_gradients", "is NaN; give a norm > 0, or <= 0 for none");
  c.nonfinite = root.get_enum("nonfinite", {"STOP", "SKIP"}, "STOP") == "STOP" ? NonFiniteAction::kStop
                                                                              : NonFiniteAction::kSkip;
  c.finetune.layer_decay = root.get_double("layer_decay", 1.0);
  if (!(c.finetune.layer_decay > 0.0 && c.finetune.layer_decay <= 1.0)) {
    bad(root, "layer_decay", "must be in (0, 1] (ViT layer-wise learning-rate decay; 1 = off), got ",
        c.finetune.layer_decay);
  }
  c.finetune.no_weight_decay =
      root.get_enum("no_weight_decay", {"NONE", "BIASES_NORMS_EMBEDDINGS"}, "NONE") == "NONE"
          ? NoWeightDecay::kNone
          : NoWeightDecay::kBiasesNormsEmbeddings;

  // ---- reporting and snapshots ----
  c.display = root.get_int("display", 100);
  if (c.display < 0) bad(root, "display", "must be >= 0 (0: no progress lines), got ", c.display);
  c.average_loss = root.get_int("average_loss", 1);
  if (c.average_loss < 1) bad(root, "average_loss", "must be >= 1, got ", c.average_loss);
  c.snapshot = root.get_int("snapshot", 0);
  if (c.snapshot < 0) bad(root, "snapshot", "must be >= 0 (0: no periodic snapshots), got ", c.snapshot);
  const std::string prefix = root.get_string("snapshot_prefix", "");
  // Output paths follow the nets: relative to the working directory when the
  // nets were found there (a Caffe-layout run), else beside the solver.
  const std::string output_dir = nets_in_working_directory ? std::string() : c.base_dir;
  c.snapshot_prefix = prefix.empty() ? strip_extension(source.empty() ? std::string("solver") : source)
                                     : resolve(output_dir, prefix);
  c.snapshot_after_train =
      root.get_bool("snapshot_after_train", true) ? SnapshotAfterTrain::kYes : SnapshotAfterTrain::kNo;
  c.snapshot_keep = root.get_int("snapshot_keep", 0);
  if (c.snapshot_keep < 0) bad(root, "snapshot_keep", "must be >= 0 (0: keep every snapshot), got ", c.snapshot_keep);
  c.snapshot_best = root.get_string("snapshot_best", "");
  {
    // AUTO: losses and errors improve downwards, everything else (accuracy, top-5) upwards.
    const std::string mode = root.get_enum("snapshot_best_mode", {"AUTO", "MAX", "MIN"}, "AUTO");
    const std::string name = lower(c.snapshot_best);
    const bool lower_is_better = mode == "MIN" || (mode == "AUTO" && (name.find("loss") != std::string::npos ||
                                                                      name.find("error") != std::string::npos));
    c.snapshot_best_is = lower_is_better ? BestIs::kLower : BestIs::kHigher;
  }
  if (!c.snapshot_best.empty() && (c.test_interval <= 0 || !has_test_net)) {
    bad(root, "snapshot_best", "names a TEST net output ('", c.snapshot_best,
        "'), but this solver never tests; set test_interval and test_iter (and a TEST phase in the net), "
        "or remove snapshot_best");
  }
  root.get_enum("snapshot_format", {"HDF5", "BINARYPROTO"}, "BINARYPROTO");  // accepted; we write safetensors
  const std::string log = root.get_string("log", "");
  c.log = log.empty() ? c.snapshot_prefix + "_log.jsonl" : resolve(output_dir, log);

  // ---- run ----
  const int64_t seed = root.get_int("random_seed", 1);
  // Caffe uses -1 for "seed from the clock"; a reproducible default serves better.
  c.random_seed = seed < 0 ? 1 : static_cast<uint64_t>(seed);
  c.solver_mode = root.get_enum("solver_mode", {"CPU", "GPU"}, "CPU") == "GPU" ? SolverMode::kGPU : SolverMode::kCPU;
  c.device_id = root.get_int("device_id", 0);
  {
    const std::string p = root.get_enum("precision", {"FP32", "TF32", "BF16", "FP16"}, "FP32");
    c.precision = p == "TF32" ? Precision::kTF32 : p == "BF16" ? Precision::kBF16 : p == "FP16" ? Precision::kFP16
                                                                                                  : Precision::kFP32;
  }
  c.initial_loss_scale = root.get_double("initial_loss_scale", 65536.0);
  if (!(c.initial_loss_scale >= 1.0) || !std::isfinite(c.initial_loss_scale)) {
    bad(root, "initial_loss_scale", "must be a finite number >= 1, got ", c.initial_loss_scale);
  }
  c.loss_scale_growth_interval = root.get_int("loss_scale_growth_interval", 2000);
  if (c.loss_scale_growth_interval < 1) {
    bad(root, "loss_scale_growth_interval", "must be >= 1, got ", c.loss_scale_growth_interval);
  }
  c.debug_info = root.get_bool("debug_info", false);
  {
    const std::string m = root.get_enum("blob_memory", {"BY_LIFETIME", "SEPARATE", "BY_LIFETIME_CHECKED"}, "BY_LIFETIME");
    c.blob_memory = m == "SEPARATE"              ? BlobMemory::kSeparate
                    : m == "BY_LIFETIME_CHECKED" ? BlobMemory::kByLifetimeChecked
                                                 : BlobMemory::kByLifetime;
  }
  c.fuse_epilogues = root.get_bool("fuse_epilogues", true);
  c.channels_last = root.get_bool("channels_last", false);
  {
    const std::string r = root.get_enum("step_results", {"AUTO", "EACH_STEP", "ONE_STEP_LATER"}, "AUTO");
    c.step_results = r == "EACH_STEP"        ? StepResults::kEachStep
                     : r == "ONE_STEP_LATER" ? StepResults::kOneStepLater
                                             : StepResults::kAuto;
  }
  {
    const std::string g = root.get_enum("step_graph", {"AUTO", "ON", "OFF"}, "AUTO");
    c.step_graph = g == "ON" ? StepGraphMode::kOn : g == "OFF" ? StepGraphMode::kOff : StepGraphMode::kAuto;
  }
  c.parallel = root.block("parallel");  // ConfigError when it is not a single block
  return c;
}

SolverConfig load_solver_config(const std::string& path) {
  return parse_solver_config(parse_config_file(path), path);
}

DType storage_dtype_of(Precision p) {
  return p == Precision::kBF16 ? DType::kBF16 : p == Precision::kFP16 ? DType::kF16 : DType::kF32;
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFP32: return "FP32";
    case Precision::kTF32: return "TF32";
    case Precision::kBF16: return "BF16";
    case Precision::kFP16: return "FP16";
  }
  return "?";
}

std::vector<std::pair<std::string, std::string>> SolverConfig::training_settings() const {
  std::vector<std::pair<std::string, std::string>> out;
  auto add = [&](const std::string& key, const auto& value) {
    std::ostringstream os;
    os.precision(17);
    os << value;
    out.emplace_back(key, os.str());
  };
  add("type", solver_type_name(optimizer.type));
  add("momentum", optimizer.momentum);
  add("momentum2", optimizer.momentum2);
  add("delta", optimizer.delta);
  // Only for RMSProp, so the fingerprints of other solvers' snapshots stay as they were.
  if (optimizer.type == SolverType::kRMSProp) add("rms_decay", optimizer.rms_decay);
  add("weight_decay", optimizer.weight_decay);
  add("reg", optimizer.regularization == Regularization::kL1 ? "L1" : "L2");
  add("base_lr", lr.base_lr);
  add("policy", lr_policy_name(lr.policy));
  add("gamma", lr.gamma);
  add("power", lr.power);
  add("stepsize", lr.stepsize);
  std::string steps;
  for (int64_t v : lr.stepvalues) steps += std::to_string(v) + ',';
  add("stepvalue", steps);
  // max_iter shapes only the schedules that span it; extending a run is normal.
  if (lr.policy == LrPolicy::kPoly || lr.policy == LrPolicy::kCosine) add("max_iter", max_iter);
  add("min_lr", lr.min_lr);
  add("warmup_iter", lr.warmup_iter);
  add("warmup_start_factor", lr.warmup_start_factor);
  add("clip", clip_gradients);
  if (finetune.active()) {
    add("layer_decay", std::to_string(finetune.layer_decay));
    add("no_wd", static_cast<int>(finetune.no_weight_decay));
  }
  add("iter_size", iter_size);
  add("seed", random_seed);
  add("net", net);
  add("train_net", train_net);
  add("net_param", has_net_param ? net_param.to_string() : std::string());
  // Only when given, so the fingerprints of older snapshots stay as they were.
  if (train_state.phase || train_state.level || !train_state.stages.empty()) {
    std::string state = train_state.phase ? std::string(phase_name(*train_state.phase)) : std::string("-");
    state += ",level=" + (train_state.level ? std::to_string(*train_state.level) : std::string("-"));
    for (const std::string& st : train_state.stages) state += ",stage=" + st;
    add("train_state", state);
  }
  // Only when not the default, so FP32 runs keep the fingerprints of older snapshots.
  if (precision != Precision::kFP32) add("precision", precision_name(precision));
  return out;
}

std::string SolverConfig::fingerprint() const {
  std::string text;
  for (const auto& [key, value] : training_settings()) text += (text.empty() ? "" : ";") + key + "=" + value;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fnv1a(text)));
  return buf;
}

std::string describe_settings_change(const std::vector<std::pair<std::string, std::string>>& before,
                                     const std::vector<std::pair<std::string, std::string>>& now) {
  auto shown = [](const std::string& key, const std::string& v) {
    if (v.empty()) return std::string("(none)");
    if (key == "net_param" || v.size() > 60) return std::string("(") + std::to_string(v.size()) + " characters)";
    // Numbers were written with 17 digits: show the shortest form that reads back the same.
    char* end = nullptr;
    const double d = std::strtod(v.c_str(), &end);
    if (end && *end == '\0') {
      char buf[32];
      for (int digits = 6; digits <= 17; ++digits) {
        std::snprintf(buf, sizeof buf, "%.*g", digits, d);
        if (std::strtod(buf, nullptr) == d) return std::string(buf);
      }
    }
    return v;
  };
  std::map<std::string, std::string> old(before.begin(), before.end());
  std::string out;
  for (const auto& [key, value] : now) {
    auto it = old.find(key);
    const std::string was = it == old.end() ? std::string() : it->second;
    if (it != old.end()) old.erase(it);
    if (was == value) continue;
    out += (out.empty() ? "" : ", ") + key + " " + shown(key, was) + " -> " + shown(key, value);
  }
  for (const auto& [key, value] : old) {
    out += (out.empty() ? "" : ", ") + key + " " + shown(key, value) + " -> (none)";
  }
  return out;
}

std::string SolverConfig::summary() const {
  std::ostringstream os;
  os << solver_type_name(optimizer.type) << ", base_lr " << lr.base_lr << " (" << lr_policy_name(lr.policy);
  if (lr.warmup_iter > 0) os << ", warm-up " << lr.warmup_iter << " iterations";
  os << "), ";
  if (optimizer.type == SolverType::kAdam || optimizer.type == SolverType::kAdamW) {
    os << "betas (" << optimizer.momentum << ", " << optimizer.momentum2 << "), eps " << optimizer.delta;
  } else if (optimizer.type == SolverType::kAdaGrad) {
    os << "delta " << optimizer.delta;
  } else if (optimizer.type == SolverType::kRMSProp) {
    os << "rms_decay " << optimizer.rms_decay << ", delta " << optimizer.delta;
  } else if (optimizer.type == SolverType::kAdaDelta) {
    os << "momentum " << optimizer.momentum << ", delta " << optimizer.delta;
  } else {
    os << "momentum " << optimizer.momentum;
  }
  os << ", weight_decay " << optimizer.weight_decay << ", max_iter " << max_iter;
  if (iter_size > 1) os << ", iter_size " << iter_size;
  if (clip_gradients > 0) os << ", clip_gradients " << clip_gradients;
  if (finetune.layer_decay != 1.0) os << ", layer_decay " << finetune.layer_decay;
  if (finetune.no_weight_decay != NoWeightDecay::kNone) os << ", no weight decay on biases, norms and embeddings";
  if (precision != Precision::kFP32) os << ", precision " << precision_name(precision);
  return os.str();
}

}  // namespace strata
