#include "framework/io/checkpoint.h"

#include <cstring>
#include <sstream>

#include "framework/error.h"
#include "framework/io/file_util.h"
#include "framework/io/json.h"
#include "framework/io/crc32c.h"
#include "framework/io/safetensors.h"
#include "framework/tensor_parallel.h"

namespace strata {

namespace {

constexpr const char* kStateFormat = "strata.solverstate";
constexpr const char* kStateVersion = "1";
constexpr const char* kStateSuffix = ".solverstate.safetensors";
constexpr const char* kWeightsSuffix = ".safetensors";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string join(const std::vector<std::string>& v, size_t limit = 20) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < limit; ++i) s += (i ? ", " : "") + v[i];
  if (v.size() > limit) s += ", ... (" + std::to_string(v.size() - limit) + " more)";
  return s;
}

std::string hex_encode(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

bool hex_decode(const std::string& hex, std::string* out) {
  auto value = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (hex.size() % 2) return false;
  out->clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = value(hex[i]), lo = value(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi * 16 + lo));
  }
  return true;
}

// Layer states are text in practice; anything that is not valid UTF-8 (which
// JSON cannot carry) is stored as {"hex": "..."}.
std::string encode_states(const std::map<std::string, std::string>& states) {
  JsonValue obj = JsonValue::object();
  for (const auto& [name, state] : states) {
    if (is_valid_utf8(state)) {
      obj.set(name, JsonValue::string(state));
    } else {
      JsonValue hex = JsonValue::object();
      hex.set("hex", JsonValue::string(hex_encode(state)));
      obj.set(name, std::move(hex));
    }
  }
  return obj.dump();
}

std::map<std::string, std::string> decode_states(const std::string& text, const std::string& what) {
  std::map<std::string, std::string> out;
  JsonValue v;
  try {
    v = parse_json(text);
  } catch (const JsonError& e) {
    fail<IoError>(what, ": ", e.what());
  }
  if (!v.is_object()) fail<IoError>(what, ": expected a JSON object");
  for (const auto& [name, state] : v.as_object()) {
    if (state.is_string()) {
      out[name] = state.as_string();
      continue;
    }
    const JsonValue* hex = state.find("hex");
    std::string bytes;
    if (!hex || !hex->is_string() || !hex_decode(hex->as_string(), &bytes)) {
      fail<IoError>(what, ": state of layer '", name, "' is neither a string nor {\"hex\": ...}");
    }
    out[name] = bytes;
  }
  return out;
}

std::string encode_floats(const std::vector<float>& v) {
  // Bit patterns, so the smoothed loss resumes exactly.
  std::string s;
  char buf[16];
  for (float f : v) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    std::snprintf(buf, sizeof buf, "%08x", bits);
    if (!s.empty()) s += ',';
    s += buf;
  }
  return s;
}

std::vector<float> decode_floats(const std::string& s, const std::string& what) {
  std::vector<float> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t end = s.find(',', pos);
    if (end == std::string::npos) end = s.size();
    const std::string tok = s.substr(pos, end - pos);
    char* stop = nullptr;
    const unsigned long bits = std::strtoul(tok.c_str(), &stop, 16);
    if (tok.size() != 8 || *stop != '\0') fail<IoError>(what, ": bad value '", tok, "'");
    const uint32_t b = static_cast<uint32_t>(bits);
    float f;
    std::memcpy(&f, &b, 4);
    out.push_back(f);
    pos = end + 1;
  }
  return out;
}

int64_t parse_int(const Metadata& md, const std::string& key, const std::string& path) {
  auto it = md.find(key);
  if (it == md.end()) fail<IoError>(path, ": solver state has no '", key, "' entry in its metadata");
  try {
    size_t used = 0;
    const long long v = std::stoll(it->second, &used);
    if (used != it->second.size()) throw std::invalid_argument("trailing text");
    return v;
  } catch (const std::exception&) {
    fail<IoError>(path, ": metadata '", key, "' is not an integer: '", it->second, "'");
  }
}

// How the owner layer splits a net parameter (found by its blob).
ParamShard shard_of_param(const Net& net, const NetParam& p) {
  if (p.owner_layer < 0) return {};
  const Layer& layer = net.layer(p.owner_layer);
  for (size_t i = 0; i < layer.params().size(); ++i) {
    if (layer.params()[i].blob == p.blob) return layer.param_shard(i);
  }
  return {};
}

// Split parameters by name, for the optimizer history "<param>.<slot>".
std::map<std::string, ParamShard> split_params_by_name(const Net& net) {
  std::map<std::string, ParamShard> out;
  for (const NetParam& p : net.params()) {
    const ParamShard s = shard_of_param(net, p);
    if (s.split()) out[p.name] = s;
  }
  return out;
}

const ParamShard* history_shard(const std::map<std::string, ParamShard>& split, const std::string& entry) {
  const size_t dot = entry.rfind('.');
  if (dot == std::string::npos) return nullptr;
  auto it = split.find(entry.substr(0, dot));
  return it == split.end() ? nullptr : &it->second;
}

}  // namespace

// ---- tensor parallelism ----

bool has_split_params(const Net& net) {
  for (const NetParam& p : net.params()) {
    if (shard_of_param(net, p).split()) return true;
  }
  return false;
}

std::map<int, Tensor> gather_split_params(const Net& net) {
  std::map<int, Tensor> out;
  for (size_t i = 0; i < net.params().size(); ++i) {
    const NetParam& p = net.params()[i];
    const ParamShard s = shard_of_param(net, p);
    if (s.split()) out.emplace(static_cast<int>(i), gather_shard(p.blob->data, s));
  }
  return out;
}

void gather_split_history(const Net& net, std::vector<std::pair<std::string, Tensor>>& history) {
  const std::map<std::string, ParamShard> split = split_params_by_name(net);
  for (auto& [name, t] : history) {
    if (const ParamShard* s = history_shard(split, name)) t = gather_shard(t, *s);
  }
}

void slice_split_history(const Net& net, std::vector<std::pair<std::string, Tensor>>& history) {
  const std::map<std::string, ParamShard> split = split_params_by_name(net);
  for (auto& [name, t] : history) {
    const ParamShard* s = history_shard(split, name);
    // A history of another shape is reported by the caller's shape check.
    if (s && t.ndim() > s->axis && t.dim(s->axis) % (static_cast<int64_t>(s->parts) * s->segments) == 0) {
      t = slice_shard(t, *s);
    }
  }
}

// ---- checksums ----

void add_tensor_checksums(const std::vector<TensorToWrite>& tensors, Metadata& md) {
  for (const TensorToWrite& t : tensors) {
    size_t n = dtype_size(t.dtype);
    for (int64_t d : t.shape) n *= static_cast<size_t>(d);
    md["crc32c." + t.name] = crc32c_hex(crc32c(t.data, n));
  }
}

Metadata without_tensor_checksums(const Metadata& md) {
  Metadata out;
  for (const auto& [k, v] : md) {
    if (k.rfind("crc32c.", 0) != 0) out.emplace(k, v);
  }
  return out;
}

namespace {

// Files written with checksums (strata's since they carry them) are checked
// in full before anything is loaded; a file without them loads as before.
void verify_checksums(const SafetensorsReader& reader, const std::string& path) {
  const Metadata& md = reader.metadata();
  for (const TensorView& v : reader.tensors()) {
    const auto it = md.find("crc32c." + v.name);
    if (it == md.end()) continue;
    const std::string got = crc32c_hex(crc32c(v.data, v.nbytes));
    if (got != it->second) {
      fail<IoError>(path, ": tensor '", v.name, "' does not match its checksum (stored ", it->second, ", computed ",
                    got, "): the file was damaged after it was written; use another snapshot or a fresh copy");
    }
  }
}

}  // namespace

// ---- weights ----

void save_weights(const Net& net, const std::string& path, const Metadata& metadata) {
  const std::map<int, Tensor> gathered = gather_split_params(net);
  std::vector<TensorToWrite> tensors;
  std::vector<Tensor> on_host;  // host copies of parameters that live on a GPU
  on_host.reserve(net.params().size());
  for (size_t i = 0; i < net.params().size(); ++i) {
    const NetParam& p = net.params()[i];
    auto g = gathered.find(static_cast<int>(i));
    on_host.push_back((g == gathered.end() ? p.blob->data : g->second).to(Device::cpu()));
    const Tensor& t = on_host.back();
    STRATA_CHECK(t.dtype() == DType::kF32 && t.device().is_cpu(), "parameter '", p.name,
                 "' must be an f32 CPU tensor to be saved");
    tensors.push_back(TensorToWrite{p.name, DType::kF32, t.shape(), t.raw_data()});
  }
  Metadata md = metadata;
  md.emplace("format", "strata");
  md.emplace("net", net.name());
  add_tensor_checksums(tensors, md);
  write_safetensors(path, tensors, md);
}

std::string LoadReport::str() const {
  std::ostringstream os;
  os << "loaded " << loaded.size() << " parameter" << (loaded.size() == 1 ? "" : "s");
  if (!reinitialized.empty()) os << "\n  re-initialised (--reinit): " << join(reinitialized);
  if (!mismatched.empty()) os << "\n  of which shapes differed: " << join(mismatched);
  if (!missing.empty()) os << "\n  missing from the file (left as initialised): " << join(missing);
  if (!unexpected.empty()) os << "\n  in the file but not in the net (ignored): " << join(unexpected);
  return os.str();
}

LoadReport load_weights(Net& net, const std::string& path, const LoadOptions& options) {
  for (const std::string& layer : options.reinit) net.layer_index(layer);  // ConfigError if unknown
  SafetensorsReader reader(path);
  verify_checksums(reader, path);
  LoadReport report;
  report.metadata = reader.metadata();

  std::vector<std::string> shape_errors, type_errors;
  std::vector<std::string> shape_differences;  // the same, without the advice
  std::set<std::string> used;
  for (NetParam& p : net.params()) {
    const std::string& layer = net.layer(p.owner_layer).name();
    const TensorView* v = reader.find(p.name);
    if (v) used.insert(p.name);
    if (options.reinit.count(layer)) {
      report.reinitialized.push_back(p.name);
      if (v && v->shape != full_shape(p.blob->shape(), shard_of_param(net, p))) report.mismatched.push_back(p.name);
      continue;
    }
    if (!v) {
      report.missing.push_back(p.name);
      continue;
    }
    // A split parameter's block is sliced out of the full tensor in the file.
    const ParamShard shard = shard_of_param(net, p);
    const Shape full = full_shape(p.blob->shape(), shard);
    if (v->shape != full) {
      shape_differences.push_back("parameter '" + p.name + "': checkpoint has " + shape_str(v->shape) +
                                  ", net has " + shape_str(full));
      shape_errors.push_back(shape_differences.back() +
                             "; to train this layer from scratch, rename the layer or pass --reinit " + layer);
      continue;
    }
    Tensor staged;
    if (shard.split()) staged = Tensor(full);
    // A parameter on a GPU is assembled on the host, then copied over once.
    const bool on_device = !p.blob->data.device().is_cpu();
    Tensor host_param = on_device ? Tensor(p.blob->shape()) : p.blob->data;
    float* dst = shard.split() ? staged.data<float>() : host_param.data<float>();
    if (convert_to_f32(v->dtype, v->data, dst, shard.split() ? staged.numel() : p.blob->numel())) {
      if (shard.split()) {
        copy_shard_out(staged.data<float>(), full, shard, host_param.data<float>());
      }
      if (on_device) p.blob->data.copy_from(host_param);
    } else {
      type_errors.push_back("parameter '" + p.name + "' is stored as " + dtype_name(v->dtype) +
                            "; expected a floating-point type (F32, F16 or BF16)");
      continue;
    }
    report.loaded.push_back(p.name);
  }
  for (const TensorView& v : reader.tensors()) {
    if (!used.count(v.name)) report.unexpected.push_back(v.name);
  }

  auto combine = [&](const std::vector<std::string>& lines) {
    std::string msg = path + ": ";
    if (lines.size() > 1) msg += std::to_string(lines.size()) + " parameters do not fit the net:";
    for (const auto& l : lines) msg += (lines.size() > 1 ? "\n  " : "") + l;
    return msg;
  };
  // Most of the net missing from the file, and some of what is there in
  // other shapes: weights of another architecture (VGG's into a ViT), which
  // no --reinit of a layer or two would fix.
  const size_t total = net.params().size() - report.reinitialized.size();
  if (!shape_errors.empty() && 2 * (report.loaded.size() + shape_errors.size()) < total) {
    std::string msg = path + ": these weights are not for net '" + net.name() + "' (another architecture, or a " +
                      "wrong --weights-format): of its " + std::to_string(total) + " parameters " +
                      std::to_string(report.loaded.size()) + " are in the file with their shapes, " +
                      std::to_string(shape_errors.size()) + " with other shapes and " +
                      std::to_string(report.missing.size()) + " not at all. Load weights made for this model.";
    for (size_t i = 0; i < shape_differences.size() && i < 3; ++i) msg += "\n  " + shape_differences[i];
    if (shape_differences.size() > 3) msg += "\n  ... (" + std::to_string(shape_differences.size() - 3) + " more)";
    throw ShapeError(msg);
  }
  if (!shape_errors.empty()) throw ShapeError(combine(shape_errors));
  if (!type_errors.empty()) throw IoError(combine(type_errors));
  if (options.missing == MissingParams::kError && !report.missing.empty()) {
    fail<IoError>(path, ": ", report.missing.size(), " parameters of net '", net.name(),
                  "' are not in the file: ", join(report.missing));
  }
  if (options.unexpected == UnexpectedParams::kError && !report.unexpected.empty()) {
    fail<IoError>(path, ": ", report.unexpected.size(), " tensors in the file are not parameters of net '",
                  net.name(), "': ", join(report.unexpected));
  }
  return report;
}

// ---- snapshots ----

SnapshotPaths snapshot_paths(const std::string& prefix, int64_t iter) {
  const std::string base = prefix + "_iter_" + std::to_string(iter);
  return SnapshotPaths{base + kWeightsSuffix, base + kStateSuffix};
}

std::string weights_path_for_state(const std::string& state_path) {
  if (!ends_with(state_path, kStateSuffix)) {
    fail<IoError>(state_path, ": a solver state file name ends in ", kStateSuffix,
                  " (e.g. lenet_iter_1000", kStateSuffix, "); pass that file to resume");
  }
  return state_path.substr(0, state_path.size() - std::strlen(kStateSuffix)) + kWeightsSuffix;
}

void save_solver_state(const std::string& path, const SolverState& state) {
  std::vector<TensorToWrite> tensors;
  std::vector<Tensor> on_host;  // host copies of history that lives on a GPU
  on_host.reserve(state.history.size());
  for (const auto& [name, history] : state.history) {
    on_host.push_back(history.to(Device::cpu()));
    const Tensor& t = on_host.back();
    STRATA_CHECK(t.dtype() == DType::kF32 && t.device().is_cpu(), "solver history '", name,
                 "' must be an f32 CPU tensor");
    tensors.push_back(TensorToWrite{name, DType::kF32, t.shape(), t.raw_data()});
  }
  Metadata md;
  md["format"] = kStateFormat;
  md["version"] = kStateVersion;
  md["iter"] = std::to_string(state.iter);
  md["solver_type"] = state.solver_type;
  md["optimizer_steps"] = std::to_string(state.optimizer_steps);
  md["layer_states"] = encode_states(state.layer_states);
  md["test_layer_states"] = encode_states(state.test_layer_states);
  md["loss_window"] = encode_floats(state.loss_window);
  md["config_fingerprint"] = state.config_fingerprint;
  md["settings"] = encode_states({state.settings.begin(), state.settings.end()});
  md["weights_file"] = state.weights_file;
  add_tensor_checksums(tensors, md);
  write_safetensors(path, tensors, md);
}

namespace {

// The metadata checks every reader of a state file makes: its format, its
// version and its iteration.
int64_t checked_state_iter(const Metadata& md, const std::string& path) {
  auto fmt = md.find("format");
  if (fmt == md.end() || fmt->second != kStateFormat) {
    fail<IoError>(path, ": not a strata solver state (metadata 'format' is ",
                  fmt == md.end() ? std::string("absent") : "'" + fmt->second + "'",
                  "); to start from plain weights use --weights instead of resuming");
  }
  auto version = md.find("version");
  if (version == md.end()) fail<IoError>(path, ": solver state has no 'version' entry in its metadata");
  if (version->second != kStateVersion) {
    fail<IoError>(path, ": solver state version ", version->second, " is not supported (expected ", kStateVersion, ")");
  }
  const int64_t iter = parse_int(md, "iter", path);
  if (iter < 0) fail<IoError>(path, ": negative iteration in solver state");
  return iter;
}

}  // namespace

int64_t solver_state_iter(const std::string& path) {
  const SafetensorsReader reader(path);
  return checked_state_iter(reader.metadata(), path);
}

SolverState load_solver_state(const std::string& path) {
  SafetensorsReader reader(path);
  verify_checksums(reader, path);
  const Metadata& md = reader.metadata();
  auto get = [&](const std::string& key) -> std::string {
    auto it = md.find(key);
    if (it == md.end()) fail<IoError>(path, ": solver state has no '", key, "' entry in its metadata");
    return it->second;
  };
  SolverState s;
  s.iter = checked_state_iter(md, path);
  s.optimizer_steps = parse_int(md, "optimizer_steps", path);
  if (s.optimizer_steps < 0) fail<IoError>(path, ": negative iteration in solver state");
  s.solver_type = get("solver_type");
  s.layer_states = decode_states(get("layer_states"), path + ": layer_states");
  s.test_layer_states = decode_states(get("test_layer_states"), path + ": test_layer_states");
  s.loss_window = decode_floats(get("loss_window"), path + ": loss_window");
  s.config_fingerprint = get("config_fingerprint");
  if (auto settings = md.find("settings"); settings != md.end()) {
    const auto decoded = decode_states(settings->second, path + ": settings");
    s.settings.assign(decoded.begin(), decoded.end());
  }
  s.weights_file = get("weights_file");
  for (const TensorView& v : reader.tensors()) {
    if (v.dtype != DType::kF32) {
      fail<IoError>(path, ": history tensor '", v.name, "' is ", dtype_name(v.dtype), ", expected f32");
    }
    Tensor t(v.shape);
    if (v.nbytes) std::memcpy(t.raw_data(), v.data, v.nbytes);
    s.history.emplace_back(v.name, std::move(t));
  }
  return s;
}

}  // namespace strata
