#include "layers/embed.h"

#include <cmath>
#include <sstream>
#include <string>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/cpu/threads.h"

namespace strata {

EmbedLayer::EmbedLayer(const LayerSpec& spec, const LayerContext& ctx) : Layer(spec, ctx) {
  const ConfigNode& p = block("embed_param");
  const std::string context = "embed_param of " + where() + " at " + p.loc().str();
  num_output_ = p.get_int("num_output");
  if (num_output_ <= 0) fail<ConfigError>(context, ": num_output must be > 0, got ", num_output_);
  input_dim_ = p.get_int("input_dim");
  if (input_dim_ <= 0) {
    fail<ConfigError>(context, ": input_dim (the number of rows, i.e. distinct indices) must be > 0, got ", input_dim_);
  }
  bias_ = p.get_bool("bias_term", true) ? Bias::kYes : Bias::kNo;
  weight_filler_ = parse_filler(p.block("weight_filler"), default_weight_filler(), "weight_filler of " + where());
  bias_filler_ = parse_filler(p.block("bias_filler"), FillerSpec{}, "bias_filler of " + where());
}

LayerSchema EmbedLayer::schema() {
  LayerSchema s;
  s.kind = LayerKind::kEmbedding;
  s.summary = "Looks up rows of a learned [input_dim, num_output] table by index (Caffe Embed, nn.Embedding)";
  s.blocks = {{"embed_param", {"num_output", "input_dim", "bias_term", "weight_filler", "bias_filler"}}};
  LayerExample plain = layer_example(
      "embed_param { num_output: 3 input_dim: 5 bias_filler { type: 'gaussian' } }", {{4, 2}});
  plain.inputs = {InputKind::kLabels};
  plain.label_classes = 5;
  LayerExample no_bias = layer_example("embed_param { num_output: 2 input_dim: 3 bias_term: false }", {{6}});
  no_bias.inputs = {InputKind::kLabels};
  no_bias.label_classes = 3;
  s.examples = {plain, no_bias};
  return s;
}

void EmbedLayer::setup(const BlobVec& /*bottom*/, const BlobVec& /*top*/) {
  fill(weight_filler_, add_param("weight", {input_dim_, num_output_}).data, rng_);
  if (bias_ == Bias::kYes) fill(bias_filler_, add_param("bias", {num_output_}).data, rng_);
}

void EmbedLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  Shape out = bottom[0]->shape();
  positions_ = bottom[0]->numel();
  out.push_back(num_output_);
  top[0]->resize(out);
}

void EmbedLayer::bad_index(int64_t i, float v, const Shape& bottom_shape) const {
  std::ostringstream value;
  value << v;
  shape_error("index " + value.str() + " at position " + std::to_string(i) + " of bottom " + shape_str(bottom_shape) +
              " is not a whole number in [0, " + std::to_string(input_dim_) +
              "); the indices must be row numbers of the table (raise embed_param input_dim if the data has more)");
}

void EmbedLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const float* idx = bottom[0]->data.data<float>();
  for (int64_t i = 0; i < positions_; ++i) {
    const float v = idx[i];
    if (!(v >= 0.0f && v < static_cast<float>(input_dim_)) || v != std::floor(v)) {
      bad_index(i, v, bottom[0]->shape());
    }
  }
  const int64_t n = num_output_;
  const float* w = param(0).data.data<float>();
  const float* b = bias_ == Bias::kYes ? param(1).data.data<float>() : nullptr;
  float* y = top[0]->data.data<float>();
  parallel_for(positions_, 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float* row = w + static_cast<int64_t>(idx[i]) * n;
      for (int64_t j = 0; j < n; ++j) y[i * n + j] = row[j] + (b ? b[j] : 0.0f);
    }
  });
}

void EmbedLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& /*propagate_down*/,
                              const BlobVec& bottom) {
  const int64_t n = num_output_;
  const float* idx = bottom[0]->data.data<float>();
  const float* dy = top[0]->diff.data<float>();
  float* dw = param(0).diff.data<float>();
  float* db = bias_ == Bias::kYes ? param(1).diff.data<float>() : nullptr;
  // By columns: positions that share a row never race.
  parallel_for(n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = 0; i < positions_; ++i) {
      float* row = dw + static_cast<int64_t>(idx[i]) * n;
      for (int64_t j = begin; j < end; ++j) row[j] += dy[i * n + j];
    }
    if (!db) return;
    for (int64_t j = begin; j < end; ++j) {
      double s = 0.0;
      for (int64_t i = 0; i < positions_; ++i) s += dy[i * n + j];
      db[j] += static_cast<float>(s);
    }
  });
}

STRATA_REGISTER_LAYER("Embed", EmbedLayer);

}  // namespace strata
