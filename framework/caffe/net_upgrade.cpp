#include "framework/caffe/net_upgrade.h"

#include <cstdio>
#include <map>
#include <mutex>
#include <set>

#include "framework/config/config_problems.h"
#include "framework/error.h"

namespace strata {

const std::vector<std::pair<std::string, std::string>>& v1_layer_types() {
  // Caffe's V1LayerParameter.LayerType and UpgradeV1LayerType.
  static const std::vector<std::pair<std::string, std::string>> types = {
      {"ABSVAL", "AbsVal"},
      {"ACCURACY", "Accuracy"},
      {"ARGMAX", "ArgMax"},
      {"BNLL", "BNLL"},
      {"CONCAT", "Concat"},
      {"CONTRASTIVE_LOSS", "ContrastiveLoss"},
      {"CONVOLUTION", "Convolution"},
      {"DECONVOLUTION", "Deconvolution"},
      {"DATA", "Data"},
      {"DROPOUT", "Dropout"},
      {"DUMMY_DATA", "DummyData"},
      {"EUCLIDEAN_LOSS", "EuclideanLoss"},
      {"ELTWISE", "Eltwise"},
      {"EXP", "Exp"},
      {"FLATTEN", "Flatten"},
      {"HDF5_DATA", "HDF5Data"},
      {"HDF5_OUTPUT", "HDF5Output"},
      {"HINGE_LOSS", "HingeLoss"},
      {"IM2COL", "Im2col"},
      {"IMAGE_DATA", "ImageData"},
      {"INFOGAIN_LOSS", "InfogainLoss"},
      {"INNER_PRODUCT", "InnerProduct"},
      {"LRN", "LRN"},
      {"MEMORY_DATA", "MemoryData"},
      {"MULTINOMIAL_LOGISTIC_LOSS", "MultinomialLogisticLoss"},
      {"MVN", "MVN"},
      {"POOLING", "Pooling"},
      {"POWER", "Power"},
      {"RELU", "ReLU"},
      {"SIGMOID", "Sigmoid"},
      {"SIGMOID_CROSS_ENTROPY_LOSS", "SigmoidCrossEntropyLoss"},
      {"SILENCE", "Silence"},
      {"SOFTMAX", "Softmax"},
      {"SOFTMAX_LOSS", "SoftmaxWithLoss"},
      {"SPLIT", "Split"},
      {"SLICE", "Slice"},
      {"TANH", "TanH"},
      {"WINDOW_DATA", "WindowData"},
      {"THRESHOLD", "Threshold"},
  };
  return types;
}

bool is_v1_net(const ConfigNode& root) { return root.has("layers"); }

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string where_of(const ConfigNode& layers) {
  const ConfigNode* n = layers.find("name");
  return (n ? "V1 layer '" + n->text() + "'" : std::string("V1 layer")) + " at " + layers.loc().str();
}

// One `param { }` per blob index, filled from V1's parallel repeated fields.
class ParamBlocks {
 public:
  explicit ParamBlocks(SourceLocation loc) : loc_(std::move(loc)) {}
  void set(size_t index, const std::string& key, const ConfigNode& value, bool quoted) {
    while (blocks_.size() <= index) blocks_.push_back(ConfigNode::block("param", loc_));
    blocks_[index].add_child(ConfigNode::scalar(key, value.text(), quoted, value.loc()));
  }
  std::vector<ConfigNode>& blocks() { return blocks_; }

 private:
  SourceLocation loc_;
  std::vector<ConfigNode> blocks_;
};

// Caffe's UpgradeV1LayerParameter for one `layers { }` block.
ConfigNode upgrade_layer(const ConfigNode& v1, ConfigProblems& problems) {
  const std::string where = where_of(v1);
  ConfigNode layer = ConfigNode::block("layer", v1.loc());
  ParamBlocks params(v1.loc());
  std::vector<ConfigNode> moved_transform;  // V0-era data layer fields
  std::map<std::string, size_t> counts;
  for (const ConfigNode& c : v1.children()) {
    const std::string& key = c.key();
    const size_t index = counts[key]++;
    if (key == "name" || key == "bottom" || key == "top" || key == "include" || key == "exclude" ||
        key == "loss_weight" || key == "propagate_down" || key == "transform_param") {
      layer.add_child(c);
    } else if (key == "type") {
      std::string current;
      for (const auto& [v1_name, name] : v1_layer_types()) {
        if (c.text() == v1_name) current = name;
      }
      if (current.empty()) {
        problems.add(where + ": type " + c.text() + " is not a V1 layer type (V1 types are written as enum names, " +
                     "e.g. type: CONVOLUTION); write the layer in the current format: layer { type: \"...\" }");
        continue;
      }
      layer.add_child(ConfigNode::scalar("type", current, true, c.loc()));
    } else if (key == "blobs_lr") {
      params.set(index, "lr_mult", c, false);
    } else if (key == "weight_decay") {
      params.set(index, "decay_mult", c, false);
    } else if (key == "param") {
      params.set(index, "name", c, true);
    } else if (key == "blob_share_mode") {
      params.set(index, "share_mode", c, false);
    } else if (key == "layer") {
      problems.add(where + ": holds a nested `layer { }`: this is Caffe's V0 format; convert it with Caffe's "
                   "tools/upgrade_net_proto_text (or write it as layer { type: \"...\" } blocks)");
    } else if (c.is_block() && ends_with(key, "_param")) {
      if (key == "data_param" || key == "image_data_param" || key == "window_data_param") {
        // Caffe's UpgradeNetDataTransformation: these lived in the data parameters once.
        ConfigNode kept = ConfigNode::block(key, c.loc());
        for (const ConfigNode& f : c.children()) {
          const bool transform = f.key() == "scale" || f.key() == "mean_file" || f.key() == "crop_size" ||
                                 f.key() == "mirror";
          (transform ? moved_transform : kept.mutable_children()).push_back(f);
        }
        layer.add_child(std::move(kept));
      } else {
        layer.add_child(c);
      }
    } else {
      problems.add(where + ": unknown V1 key '" + key + "' at " + c.loc().str() +
                   " (V1 layers take name, type, bottom, top, blobs_lr, weight_decay, param, blob_share_mode, "
                   "loss_weight, include, exclude, propagate_down and *_param blocks)");
    }
  }
  if (!moved_transform.empty()) {
    if (layer.has("transform_param")) {
      problems.add(where + ": gives scale/mean_file/crop_size/mirror both in its data parameters and in "
                   "transform_param; keep them in transform_param only");
    } else {
      ConfigNode t = ConfigNode::block("transform_param", v1.loc());
      for (ConfigNode& f : moved_transform) t.add_child(std::move(f));
      layer.add_child(std::move(t));
    }
  }
  for (ConfigNode& p : params.blocks()) layer.add_child(std::move(p));
  return layer;
}

void notice_once(const ConfigNode& root, size_t layers) {
  static std::mutex mu;
  static std::set<std::string> seen;
  const std::string file = root.loc().file ? *root.loc().file : std::string("<net>");
  std::lock_guard<std::mutex> lock(mu);
  if (!seen.insert(file).second) return;
  std::fprintf(stderr,
               "note: %s: upgraded from Caffe's V1 format (%zu `layers { type: ENUM }` blocks read as "
               "`layer { type: \"Name\" }`, blobs_lr/weight_decay as param { lr_mult decay_mult }), as Caffe "
               "does on load\n",
               file.c_str(), layers);
}

}  // namespace

ConfigNode upgrade_v1_net(const ConfigNode& root) {
  ConfigProblems problems;
  if (root.has("layer")) {
    fail<ConfigError>("the net at ", root.loc().str(), " has both `layer { }` (current format, first at ",
                      root.all("layer")[0]->loc().str(), ") and `layers { }` (Caffe's V1 format, first at ",
                      root.all("layers")[0]->loc().str(), ") blocks; write every layer in one format (Caffe refuses "
                      "this mix too)");
  }
  ConfigNode out = ConfigNode::block(root.key(), root.loc());
  size_t n = 0;
  for (const ConfigNode& c : root.children()) {
    if (c.key() == "layers" && c.is_block()) {
      out.add_child(upgrade_layer(c, problems));
      ++n;
    } else {
      out.add_child(c);
    }
  }
  problems.throw_if_any("the V1 net at " + root.loc().str());
  notice_once(root, n);
  return out;
}

}  // namespace strata
