// Fine-tuning policies of the solver file, applied to the TRAIN net's
// parameters once the Solver has built it:
//   layer_decay: F   (0 < F <= 1) layer-wise learning-rate decay for ViT: a
//                    layer at depth d of L blocks gets lr_mult *= F^(L+1-d),
//                    where embedding layers (LayerKind::kEmbedding:
//                    PatchEmbed, PositionEmbedding) and layers before the
//                    first block are depth 0, layers named block{i}_* depth
//                    i+1, and layers after the last block L+1.
//   no_weight_decay: NONE | BIASES_NORMS_EMBEDDINGS
//                    decay_mult 0 for biases ("bias", "*_bias"), every
//                    parameter of a normalisation layer
//                    (LayerKind::kNormalization: LayerNorm, BatchNorm, Scale)
//                    and the parameters a schema lists as embedding_params
//                    (the class token and the position embedding).
// Kinds come from each layer type's schema (framework/layer.h), so a new
// norm or embedding layer is covered by declaring its kind.
#pragma once

#include <string>
#include <vector>

namespace strata {

class Net;

enum class NoWeightDecay { kNone, kBiasesNormsEmbeddings };

struct FinetunePolicy {
  double layer_decay = 1.0;  // 1: off
  NoWeightDecay no_weight_decay = NoWeightDecay::kNone;
  bool active() const { return layer_decay != 1.0 || no_weight_decay != NoWeightDecay::kNone; }
};

// The ViT depth of each layer of the net (see above) and L, the number of
// blocks. ConfigError when no layer is named block{i}_*.
struct LayerDepths {
  std::vector<int> depth;  // per layer index
  int blocks = 0;          // L
};
LayerDepths vit_layer_depths(const Net& net);

// Multiplies lr_mult and zeroes decay_mult as the policy says. Frozen
// parameters (lr_mult 0) stay frozen.
void apply_finetune_policy(Net& net, const FinetunePolicy& policy);

}  // namespace strata
