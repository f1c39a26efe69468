#include "framework/solver/finetune_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/net.h"

namespace strata {

namespace {

// "block11_fc1" -> 11; -1 for any other name.
int block_index(const std::string& name) {
  const std::string prefix = "block";
  if (name.compare(0, prefix.size(), prefix) != 0) return -1;
  size_t i = prefix.size();
  const size_t start = i;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
  if (i == start || i - start > 6 || i >= name.size() || name[i] != '_') return -1;
  return std::atoi(name.substr(start, i - start).c_str());
}

// What the layer's type declares about itself.
LayerSchema schema_of(const Layer& layer) { return LayerRegistry::instance().find(layer.type()).schema(); }

// The short name ("bias", "in_proj_bias", "class_token") of a net parameter.
std::string short_name(const Net& net, const NetParam& p) {
  for (const LayerParam& lp : net.layer(p.owner_layer).params()) {
    if (lp.blob == p.blob) return lp.name;
  }
  return p.name;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

LayerDepths vit_layer_depths(const Net& net) {
  LayerDepths d;
  d.depth.assign(static_cast<size_t>(net.num_layers()), 0);
  int first_block_layer = -1;
  for (int i = 0; i < net.num_layers(); ++i) {
    const int b = block_index(net.layer(i).name());
    if (b < 0) continue;
    if (first_block_layer < 0) first_block_layer = i;
    d.blocks = std::max(d.blocks, b + 1);
  }
  if (first_block_layer < 0) {
    fail<ConfigError>("layer_decay needs a ViT whose blocks are named block{i}_* (block0_attn, ...); net '",
                      net.name(), "' has no such layer; remove layer_decay or set it to 1");
  }
  for (int i = 0; i < net.num_layers(); ++i) {
    const Layer& l = net.layer(i);
    const int b = block_index(l.name());
    if (b >= 0) {
      d.depth[i] = b + 1;
    } else if (schema_of(l).kind == LayerKind::kEmbedding || i < first_block_layer) {
      d.depth[i] = 0;
    } else {
      d.depth[i] = d.blocks + 1;
    }
  }
  return d;
}

void apply_finetune_policy(Net& net, const FinetunePolicy& policy) {
  if (!(policy.layer_decay > 0.0 && policy.layer_decay <= 1.0)) {
    fail<ConfigError>("layer_decay must be in (0, 1], got ", policy.layer_decay);
  }
  if (policy.layer_decay != 1.0) {
    const LayerDepths d = vit_layer_depths(net);
    for (size_t k = 0; k < net.params().size(); ++k) {
      const NetParam& p = net.params()[k];
      if (p.lr_mult == 0.0f) continue;
      const int depth = d.depth[static_cast<size_t>(p.owner_layer)];
      const double scale = std::pow(policy.layer_decay, d.blocks + 1 - depth);
      net.set_lr_mult(static_cast<int>(k), static_cast<float>(p.lr_mult * scale));
    }
  }
  if (policy.no_weight_decay == NoWeightDecay::kBiasesNormsEmbeddings) {
    std::vector<LayerSchema> schemas;
    for (int i = 0; i < net.num_layers(); ++i) schemas.push_back(schema_of(net.layer(i)));
    for (NetParam& p : net.params()) {
      const LayerSchema& owner = schemas[static_cast<size_t>(p.owner_layer)];
      const std::string name = short_name(net, p);
      const bool bias = name == "bias" || ends_with(name, "_bias");
      const bool norm = owner.kind == LayerKind::kNormalization;
      const bool embedding = std::find(owner.embedding_params.begin(), owner.embedding_params.end(), name) !=
                             owner.embedding_params.end();
      if (bias || norm || embedding) p.decay_mult = 0.0f;
    }
  }
}

}  // namespace strata
