#include "layers/infogain_loss.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "framework/caffe/caffe_db.h"
#include "framework/caffe/caffe_proto.h"
#include "framework/error.h"
#include "framework/layer_registry.h"

namespace strata {

InfogainLossLayer::InfogainLossLayer(const LayerSpec& spec, const LayerContext& ctx)
    : SoftmaxLossLayer(spec, ctx, "infogain_loss_param", LossNormalization::kValid) {
  const ConfigNode& p = block("infogain_loss_param");
  // With a third bottom Caffe uses it and ignores `source`; so does this layer.
  if (spec.bottoms.size() < 3) {
    if (!p.has("source")) {
      fail<ConfigError>(where(), " at ", spec.node.loc().str(),
                        ": InfogainLoss needs the C x C infogain matrix H: infogain_loss_param { source: "
                        "\"H.binaryproto\" } or a third bottom (scores, labels, H)");
    }
    // Caffe's binaryproto of H ([1, 1, C, C]), read once, on the layer's device.
    try {
      const Tensor h = caffe::read_binaryproto(caffe::resolve_caffe_path(ctx.base_dir, p.get_string("source")));
      h_from_file_ = ctx.device.is_cpu() ? h : h.to(ctx.device);
    } catch (const IoError& e) {
      fail<IoError>(where(), " at ", p.find("source")->loc().str(), ": infogain_loss_param.source: ", e.what());
    }
  }
}

LayerSchema InfogainLossLayer::schema() {
  LayerSchema s;
  s.summary = "Softmax + infogain-weighted log loss with a C x C matrix H from a third bottom or a binaryproto (Caffe's InfogainLoss)";
  s.blocks = {{"infogain_loss_param", {"source", "axis"}},
              {"loss_param", {"ignore_label", "normalization", "normalize"}}};
  LayerExample flat = layer_example("", {{3, 4}, {3}, {4, 4}});
  flat.inputs = {InputKind::kGaussian, InputKind::kLabels, InputKind::kPositive};
  flat.label_classes = 4;
  LayerExample spatial = flat;  // labels [N, 1, H, W], H as Caffe's [1, 1, C, C] blob
  spatial.config = "loss_param { ignore_label: 0 normalization: FULL }";
  spatial.bottom_shapes = {{2, 3, 2, 2}, {2, 1, 2, 2}, {1, 1, 3, 3}};
  spatial.label_classes = 3;
  LayerExample last_axis = flat;
  last_axis.config = "infogain_loss_param { axis: -1 } loss_param { normalization: BATCH_SIZE }";
  last_axis.bottom_shapes = {{2, 3, 4}, {2, 3}, {4, 4}};
  s.examples = {flat, spatial, last_axis};
  return s;
}

void InfogainLossLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  SoftmaxLossLayer::reshape(bottom, top);
  const int64_t C = geom_.channels;
  // An empty batch reads no H, so its size is checked only when there is a
  // position to weigh (a zero batch may shrink every bottom's first dim).
  if (geom_.outer * geom_.inner > 0 && h_of(bottom).numel() != C * C) {
    shape_error(std::string("the infogain matrix H (") + (bottom.size() > 2 ? "third bottom" : "source file") +
                ") must hold C x C = " + std::to_string(C * C) + " values for the " + std::to_string(C) +
                " classes of scores " + shape_str(bottom[0]->shape()) + ", got " + shape_str(h_of(bottom).shape()));
  }
}

double InfogainLossLayer::slice_loss_cpu(const BlobVec& bottom, const float* x, int64_t o) const {
  const int64_t C = geom_.channels, inner = geom_.inner;
  const float* H = h_of(bottom).data<float>();
  const float* mx = row_max_.data<float>();
  const float* sum = row_sum_.data<float>();
  // log p = x - max - log(sum exp(x - max)), clamped at log(1e-20) as Caffe
  // clamps p: finite even where p underflows.
  const double log_floor = std::log(static_cast<double>(kLossLogThreshold));
  double acc = 0.0;
  for (int64_t i = 0; i < inner; ++i) {
    const int64_t pos = o * inner + i;
    const int32_t l = labels_[static_cast<size_t>(pos)];
    if (l < 0) continue;
    const double log_sum = std::log(static_cast<double>(sum[pos]));
    for (int64_t c = 0; c < C; ++c) {
      const double lp = static_cast<double>(x[(o * C + c) * inner + i] - mx[pos]) - log_sum;
      acc -= static_cast<double>(H[l * C + c]) * std::max(lp, log_floor);
    }
  }
  return acc;
}

void InfogainLossLayer::prepare_backward_cpu(const BlobVec& bottom) {
  const int64_t C = geom_.channels;
  const float* H = h_of(bottom).data<float>();
  sum_rows_.resize(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    double s = 0.0;
    for (int64_t k = 0; k < C; ++k) s += H[c * C + k];
    sum_rows_[static_cast<size_t>(c)] = static_cast<float>(s);
  }
}

// Caffe's formula: d loss / dx_c = p_c * sum_k H[label, k] - H[label, c].
void InfogainLossLayer::slice_gradient_cpu(const BlobVec& bottom, int64_t o, float scale, float* dx) const {
  const int64_t C = geom_.channels, inner = geom_.inner;
  const float* H = h_of(bottom).data<float>();
  const float* prob = prob_.data<float>() + o * C * inner;
  const int32_t* lo = labels_.data() + o * inner;
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t i = 0; i < inner; ++i) {
      const int32_t l = lo[i];
      dx[c * inner + i] =
          l < 0 ? 0.0f : (prob[c * inner + i] * sum_rows_[static_cast<size_t>(l)] - H[l * C + c]) * scale;
    }
  }
}

STRATA_REGISTER_LAYER("InfogainLoss", InfogainLossLayer);

}  // namespace strata
