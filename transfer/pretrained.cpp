#include "transfer/pretrained.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <atomic>
#include <filesystem>
#include <map>

#include "framework/io/checkpoint.h"
#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/io/safetensors.h"
#include "transfer/caffemodel.h"
#include "transfer/name_maps.h"
#include "transfer/position_embedding.h"
#include "transfer/weights_file.h"

namespace strata::transfer {

namespace {

struct FormatName {
  WeightsFormat format;
  const char* name;
};
constexpr FormatName kFormats[] = {{WeightsFormat::kAuto, "auto"},
                                   {WeightsFormat::kStrata, "strata"},
                                   {WeightsFormat::kTorchvisionVgg, "torchvision-vgg"},
                                   {WeightsFormat::kTorchvisionVit, "torchvision-vit"},
                                   {WeightsFormat::kTimmVit, "timm-vit"},
                                   {WeightsFormat::kCaffe, "caffe"}};

std::string format_list() {
  std::string s;
  for (const FormatName& f : kFormats) s += std::string(s.empty() ? "" : ", ") + f.name;
  return s;
}

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

std::string join(const std::vector<std::string>& v, size_t limit = 8) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < limit; ++i) s += (i ? ", " : "") + v[i];
  if (v.size() > limit) s += ", ... (" + std::to_string(v.size() - limit) + " more)";
  return s;
}

// The file tensor as f32, converting 16-bit floats; false for other dtypes.
bool to_f32(const TensorView& v, Tensor* out) {
  *out = Tensor(v.shape);
  return convert_to_f32(v.dtype, v.data, out->data<float>(), out->numel());
}

// The NetParam a routed name stands for: the parameter of that name, or the
// `<layer>.<param>` slot of a layer whose parameter is shared under another name.
int resolve_param(const Net& net, const std::string& name) {
  const int direct = net.param_index(name);
  if (direct >= 0) return direct;
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return -1;
  const std::string layer_name = name.substr(0, dot), short_name = name.substr(dot + 1);
  for (int i = 0; i < net.num_layers(); ++i) {
    const Layer& l = net.layer(i);
    if (l.name() != layer_name) continue;
    for (const LayerParam& lp : l.params()) {
      if (lp.name != short_name) continue;
      for (size_t k = 0; k < net.params().size(); ++k) {
        if (net.params()[k].blob == lp.blob) return static_cast<int>(k);
      }
    }
  }
  return -1;
}

// The patch grid a PositionEmbedding layer sees: from the PatchEmbed layer's
// input when there is one (non-square images), else the square of its tokens.
Grid net_grid(const Net& net, int64_t tokens) {
  for (int i = 0; i < net.num_layers(); ++i) {
    const Layer& l = net.layer(i);
    if (l.type() != "PatchEmbed" || net.bottoms(i).empty()) continue;
    const Shape& in = net.bottoms(i)[0]->shape();
    const int64_t p = l.spec().node.block("patch_embed_param").get_int("patch_size", 0);
    if (in.size() == 4 && p > 0 && (in[2] / p) * (in[3] / p) == tokens) return {in[2] / p, in[3] / p};
  }
  const int64_t side = square_grid_side(tokens);
  return {side, side};
}

// A position embedding whose token count differs from the net's: resized
// bicubically (class token kept). Returns false when it is not one.
// A parameter its layer's schema declares laid out over the patch grid
// (LayerSchema::grid_params: a ViT's position embedding).
bool is_grid_param(const Net& net, const NetParam& p) {
  const Layer& owner = net.layer(p.owner_layer);
  const LayerSchema schema = LayerRegistry::instance().find(owner.type()).schema();
  for (const LayerParam& lp : owner.params()) {
    if (lp.blob == p.blob &&
        std::find(schema.grid_params.begin(), schema.grid_params.end(), lp.name) != schema.grid_params.end()) {
      return true;
    }
  }
  return false;
}

bool maybe_interpolate(const Net& net, const NetParam& p, Tensor* value, std::string* note) {
  const Layer& owner = net.layer(p.owner_layer);
  const Shape& want = p.blob->shape();
  const Shape& have = value->shape();
  if (!is_grid_param(net, p) || want.size() != 3 || have.size() != 3 || want[0] != 1 ||
      have[0] != 1 || want[2] != have[2] || want[1] == have[1]) {
    return false;
  }
  bool class_token = false;
  for (const LayerParam& lp : owner.params()) class_token = class_token || lp.name == "class_token";
  const int64_t prefix = class_token ? 1 : 0;
  const int64_t from_side = square_grid_side(have[1] - prefix);
  const Grid to = net_grid(net, want[1] - prefix);
  if (from_side == 0 || to.h == 0) return false;
  const Grid from{from_side, from_side};
  *value = interpolate_position_embedding(*value, prefix, from, to);
  *note = "interpolated bicubically from a " + std::to_string(from.h) + "x" + std::to_string(from.w) + " to a " +
          std::to_string(to.h) + "x" + std::to_string(to.w) + " patch grid" + (prefix ? ", class token kept" : "");
  return true;
}

NameMap build_map(WeightsFormat format, const Net& net, const std::vector<FileTensor>& tensors) {
  switch (format) {
    case WeightsFormat::kTorchvisionVgg: return map_torchvision_vgg(net, tensors);
    case WeightsFormat::kTorchvisionVit: return map_by_name(tensors, &torchvision_vit_name);
    case WeightsFormat::kTimmVit: return map_by_name(tensors, &timm_vit_name);
    case WeightsFormat::kStrata:
    case WeightsFormat::kCaffe:
    case WeightsFormat::kAuto: break;
  }
  return map_identity(tensors);
}


// A scratch weights file beside nothing else: removed when it goes out of scope.
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& for_path) {
    static std::atomic<int> counter{0};
    std::error_code ec;
    std::filesystem::path dir = std::filesystem::temp_directory_path(ec);
    if (ec) dir = "/tmp";
    path = (dir / ("strata_pretrained_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" +
                   std::filesystem::path(for_path).filename().string()))
               .string();
  }
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
};

// load_weights, with errors that speak of `what` (the user's file and its
// format) instead of `path`, file names beside mapped net names, and both
// ways to re-initialise a layer whose shape differs.
LoadReport load_with_advice(Net& net, const std::string& path, const std::string& what, const LoadOptions& load,
                            const std::map<std::string, std::string>& source) {
  auto rewrite = [&](std::string msg) {
    if (msg.compare(0, path.size(), path) == 0) msg = what + msg.substr(path.size());
    for (const auto& [net_name, file_name] : source) {
      if (net_name == file_name) continue;
      const std::string quoted = "parameter '" + net_name + "'";
      const size_t at = msg.find(quoted);
      if (at != std::string::npos) msg.insert(at + quoted.size(), " (from " + file_name + ")");
    }
    return msg;
  };
  try {
    return load_weights(net, path, load);
  } catch (const ShapeError& e) {
    // The hint is for a layer or two that differ (a new head); weights of
    // another architecture are named as such, and --reinit would not help.
    const std::string msg = rewrite(e.what());
    if (msg.find("pass --reinit") == std::string::npos) throw ShapeError(msg);
    throw ShapeError(msg +
                     "\n  (--reinit LAYER on the command line, or `reinit: true` in that layer { } block, "
                     "keeps the layer as initialised: a new head for another number of classes)");
  } catch (const IoError& e) {
    throw IoError(rewrite(e.what()));
  }
}

// Leading axes of size 1 dropped (at least one kept): Caffe's legacy 4-D
// blobs ([1, 1, out, in] for an InnerProduct weight) against our shapes.
Shape without_leading_ones(const Shape& s) {
  size_t i = 0;
  while (i + 1 < s.size() && s[i] == 1) ++i;
  return Shape(s.begin() + static_cast<std::ptrdiff_t>(i), s.end());
}

// A .caffemodel: blob i of Caffe layer L goes to the i-th parameter of our
// layer L (BatchNorm's three blobs to its two running statistics), then
// through load_weights as a staged safetensors file, like the name maps.
LoadReport load_caffe(Net& net, const std::string& path, const LoadOptions& load) {
  const CaffeModel model = read_caffemodel(path);
  const std::string what = path + " (caffe weights)";
  std::vector<std::string> unexpected;
  std::map<std::string, std::string> source;  // net param name -> "<caffe layer>.<param>"
  std::vector<Tensor> converted;
  std::vector<TensorToWrite> out;
  for (const CaffeLayerBlobs& cl : model.layers) {
    const Layer* ours = nullptr;
    for (int i = 0; i < net.num_layers() && !ours; ++i) {
      if (net.layer(i).name() == cl.name) ours = &net.layer(i);
    }
    std::vector<std::string> names;
    if (ours) {
      for (const LayerParam& lp : ours->params()) names.push_back(lp.name);
    } else {
      names = caffe_param_names(cl.type, cl.blobs.size());
    }
    std::vector<std::pair<std::string, Tensor>> tensors;
    try {
      tensors = caffe_layer_tensors(cl, names);
    } catch (const IoError& e) {
      fail<IoError>(what, ": ", e.what());
    }
    for (size_t k = 0; k < tensors.size(); ++k) {
      auto& [short_name, value] = tensors[k];
      const std::string file_name = cl.name + "." + short_name;
      if (!ours) {
        unexpected.push_back(file_name + " (no layer '" + cl.name + "' in the net)");
        continue;
      }
      if (k >= ours->params().size()) {
        unexpected.push_back(cl.name + " blob " + std::to_string(k) + " (layer '" + cl.name + "' has " +
                             std::to_string(ours->params().size()) + " parameters)");
        continue;
      }
      const int id = resolve_param(net, file_name);
      const std::string net_name = id >= 0 ? net.params()[id].name : "";
      if (id < 0 || source.count(net_name)) {
        unexpected.push_back(file_name + (id < 0 ? " (not in the net)" : " (given twice)"));
        continue;
      }
      const Shape& want = net.params()[id].blob->shape();
      if (value.shape() != want && without_leading_ones(value.shape()) == without_leading_ones(want)) {
        Tensor reshaped(want);
        std::memcpy(reshaped.raw_data(), value.raw_data(), static_cast<size_t>(value.numel()) * sizeof(float));
        value = reshaped;
      }
      source[net_name] = file_name;
      converted.push_back(value);
      out.push_back({net_name, DType::kF32, value.shape(), converted.back().raw_data()});
    }
  }
  if (out.empty() && !net.params().empty()) {
    std::vector<std::string> file_layers, net_layers;
    for (const CaffeLayerBlobs& cl : model.layers) file_layers.push_back(cl.name);
    for (int i = 0; i < net.num_layers(); ++i) {
      if (!net.layer(i).params().empty()) net_layers.push_back(net.layer(i).name());
    }
    fail<IoError>(what, ": none of its ", model.layers.size(), " layers with weights (", join(file_layers, 4),
                  ") is a layer of net '", net.name(), "' with parameters (", join(net_layers, 4),
                  "); Caffe weights are matched by layer name, so the net must use the names of the net "
                  "they were trained with");
  }
  const TempFile staged(path);
  Metadata metadata = {{"source", "caffemodel"}};
  if (!model.name.empty()) metadata["caffe_net"] = model.name;
  write_safetensors(staged.path, out, metadata);
  LoadReport report = load_with_advice(net, staged.path, what, load, source);
  report.unexpected = unexpected;
  report.metadata = metadata;
  return report;
}

}  // namespace

WeightsFormat parse_weights_format(const std::string& text, const std::string& flag) {
  for (const FormatName& f : kFormats) {
    if (text == f.name) return f.format;
  }
  fail<ConfigError>(flag, ": unknown weights format '", text, "'; expected one of ", format_list());
}

const char* weights_format_name(WeightsFormat format) {
  for (const FormatName& f : kFormats) {
    if (f.format == format) return f.name;
  }
  return "?";
}

WeightsFormat detect_weights_format(const std::vector<std::string>& names) {
  if (names.empty()) fail<IoError>("the weights file holds no tensors, so its format cannot be told");
  auto any = [&](auto pred) { return std::any_of(names.begin(), names.end(), pred); };
  auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  if (any([](const std::string& n) { return starts_with(n, "encoder.layers.encoder_layer_"); }) ||
      has("conv_proj.weight") || has("encoder.pos_embedding")) {
    return WeightsFormat::kTorchvisionVit;
  }
  if (has("patch_embed.proj.weight") || has("cls_token") || has("pos_embed")) return WeightsFormat::kTimmVit;
  const bool vgg = any([](const std::string& n) { return starts_with(n, "features."); }) &&
                   std::all_of(names.begin(), names.end(), [](const std::string& n) {
                     return starts_with(n, "features.") || starts_with(n, "classifier.");
                   });
  if (vgg) return WeightsFormat::kTorchvisionVgg;
  if (std::all_of(names.begin(), names.end(), [](const std::string& n) { return starts_with(n, "module."); })) {
    fail<IoError>("the tensor names start with 'module.' (", join(names, 3),
                  "): a state dict saved from torch DataParallel; convert it with "
                  "tools/convert_pth_to_safetensors.py, which removes the prefix");
  }
  return WeightsFormat::kStrata;
}

LoadReport load_pretrained(Net& net, const std::string& path, const PretrainedOptions& options) {
  LoadOptions load;
  load.reinit = options.reinit;
  for (int i = 0; i < net.num_layers(); ++i) {
    if (net.layer(i).spec().node.get_bool("reinit", false)) load.reinit.insert(net.layer(i).name());
  }

  if (options.format == WeightsFormat::kCaffe ||
      (options.format == WeightsFormat::kAuto && looks_like_caffemodel(path))) {
    return load_caffe(net, path, load);
  }

  std::map<std::string, std::string> foreign;  // tensors of dtypes strata does not read
  const SafetensorsReader reader = open_weights_file(path, &foreign);
  std::vector<FileTensor> tensors;
  std::vector<std::string> names;
  for (const TensorView& v : reader.tensors()) {
    tensors.push_back({v.name, v.shape});
    names.push_back(v.name);
  }
  WeightsFormat format = options.format;
  const bool detected = format == WeightsFormat::kAuto;
  if (detected && names.empty()) format = WeightsFormat::kStrata;  // nothing to tell apart, nothing to load
  if (format == WeightsFormat::kAuto) {
    try {
      format = detect_weights_format(names);
    } catch (const IoError& e) {
      fail<IoError>(path, ": ", e.what());
    }
  }
  const std::string what = path + " (" + weights_format_name(format) + " weights)";

  if (format == WeightsFormat::kStrata && foreign.empty()) {
    LoadReport report = load_with_advice(net, path, what, load, {});
    if (detected && report.loaded.empty() && report.reinitialized.empty() && !net.params().empty()) {
      fail<IoError>(path, ": none of its ", names.size(), " tensors is a parameter of net '", net.name(),
                    "' (the file has ", join(names, 4), "; the net has ", join(report.missing, 4),
                    "); if these are another framework's names, name the format with --weights-format (",
                    format_list(), ")");
    }
    return report;
  }

  // Route, convert where the layouts differ, and hand the result to
  // load_weights under the net's names (which also handles devices and
  // tensor-parallel slicing).
  const NameMap map = build_map(format, net, tensors);
  std::vector<std::string> unexpected;
  std::map<std::string, std::string> source;  // net param name -> file name
  std::map<std::string, std::string> notes;   // net param name -> what was done to it
  std::vector<Tensor> converted;              // storage behind `out` entries
  converted.reserve(map.routes.size());
  std::vector<TensorToWrite> out;
  for (const Route& r : map.routes) {
    const int id = resolve_param(net, r.net);
    const std::string net_name = id >= 0 ? net.params()[id].name : "";
    if (id < 0 || source.count(net_name)) {
      unexpected.push_back(r.file + " (as " + r.net + (id < 0 ? ", not in the net)" : ", given twice)"));
      continue;
    }
    source[net_name] = r.file;
    if (foreign.count(r.file)) {
      fail<IoError>(what, ": tensor '", r.file, "' (for ", net_name, ") is stored as ", foreign[r.file],
                    "; strata reads weights stored as F32, F16 or BF16 (convert the .pth with "
                    "tools/convert_pth_to_safetensors.py)");
    }
    const TensorView& v = *reader.find(r.file);
    Tensor value;
    std::string note;
    const bool on_grid = is_grid_param(net, net.params()[id]);
    if (on_grid && to_f32(v, &value) && maybe_interpolate(net, net.params()[id], &value, &note)) {
      converted.push_back(value);
      notes[net_name] = note;
      out.push_back({net_name, DType::kF32, value.shape(), converted.back().raw_data()});
    } else {
      out.push_back({net_name, v.dtype, v.shape, v.data});
    }
  }
  for (const std::string& n : map.unmapped) {
    unexpected.push_back(foreign.count(n) ? n + " (" + foreign[n] + ")" : n);
  }

  const TempFile staged(path);
  write_safetensors(staged.path, out, without_tensor_checksums(reader.metadata()));  // other tensors now
  LoadReport report = load_with_advice(net, staged.path, what, load, source);
  auto relabel = [&](std::vector<std::string>& list) {
    for (std::string& n : list) {
      auto it = source.find(n);
      if (it == source.end() || it->second == n) continue;
      auto note = notes.find(n);
      n += " (from " + it->second + (note == notes.end() ? "" : "; " + note->second) + ")";
    }
  };
  relabel(report.loaded);
  relabel(report.mismatched);
  report.unexpected = unexpected;
  report.metadata = reader.metadata();
  return report;
}

}  // namespace strata::transfer
