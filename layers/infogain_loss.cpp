#include "layers/infogain_loss.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "framework/caffe/caffe_db.h"
#include "framework/caffe/caffe_proto.h"
#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/cpu/threads.h"

namespace strata {

InfogainLossLayer::InfogainLossLayer(const LayerSpec& spec, const LayerContext& ctx)
    : Layer(spec, ctx),
      axis_(static_cast<int>(block("infogain_loss_param").get_int("axis", 1))),
      ignore_label_(read_ignore_label(block("loss_param"))),
      normalization_(read_loss_normalization(block("loss_param"), LossNormalization::kValid)) {
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
  const Tensor& x = bottom[0]->data;
  const int axis = axis_ < 0 ? axis_ + x.ndim() : axis_;
  if (axis < 0 || axis >= x.ndim()) {
    shape_error("infogain_loss_param.axis " + std::to_string(axis_) + " is out of range for scores of shape " +
                shape_str(x.shape()) + "; use an axis in [-" + std::to_string(x.ndim()) + ", " +
                std::to_string(x.ndim()) + ")");
  }
  geom_ = SoftmaxGeometry{x.count(0, axis), x.shape()[axis], x.count(axis + 1)};
  const int64_t positions = geom_.outer * geom_.inner;
  if (bottom[1]->numel() != positions) {
    shape_error("expected one label per score position (" + std::to_string(positions) + " labels for scores " +
                shape_str(x.shape()) + " with classes on axis " + std::to_string(axis) + "), got labels " +
                shape_str(bottom[1]->shape()) +
                "; labels must have the scores' shape with the class axis removed or set to 1");
  }
  const int64_t C = geom_.channels;
  // An empty batch reads no H, so its size is checked only when there is a
  // position to weigh (a zero batch may shrink every bottom's first dim).
  if (positions > 0 && h_of(bottom).numel() != C * C) {
    shape_error(std::string("the infogain matrix H (") + (bottom.size() > 2 ? "third bottom" : "source file") +
                ") must hold C x C = " + std::to_string(C * C) + " values for the " + std::to_string(C) +
                " classes of scores " + shape_str(x.shape()) + ", got " + shape_str(h_of(bottom).shape()));
  }
  top[0]->resize({});
  if (top.size() > 1) top[1]->reshape_like(*bottom[0]);
  prob_.resize(x.shape());
  row_max_.resize({positions});
  row_sum_.resize({positions});
}

void InfogainLossLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const int64_t C = geom_.channels, inner = geom_.inner;
  const float* label = bottom[1]->data.data<float>();
  labels_.resize(static_cast<size_t>(geom_.outer * inner));
  outer_loss_.resize(static_cast<size_t>(geom_.outer));
  // Checked serially first: errors cannot be thrown out of the threaded loop.
  int64_t valid = 0;
  for (size_t k = 0; k < labels_.size(); ++k) {
    labels_[k] = class_label(where(), label[k], static_cast<int64_t>(k), inner, C, ignore_label_);
    valid += labels_[k] >= 0 ? 1 : 0;
  }
  const float* x = bottom[0]->data.data<float>();
  const float* H = h_of(bottom).data<float>();
  const float* mx = row_max_.data<float>();
  const float* sum = row_sum_.data<float>();
  softmax_forward(geom_, x, prob_.data<float>(), row_max_.data<float>(), row_sum_.data<float>());
  // log p = x - max - log(sum exp(x - max)), clamped at log(1e-20) as Caffe
  // clamps p: finite even where p underflows.
  const double log_floor = std::log(static_cast<double>(kLossLogThreshold));
  const int64_t chunk = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, C * inner));
  parallel_for(geom_.outer, chunk, [&](int64_t ob, int64_t oe) {
    for (int64_t o = ob; o < oe; ++o) {
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
      outer_loss_[static_cast<size_t>(o)] = acc;
    }
  });
  double total = 0.0;
  for (double v : outer_loss_) total += v;
  divisor_ = loss_divisor(normalization_, geom_.outer, geom_.outer * inner, valid);
  top[0]->data.data<float>()[0] = static_cast<float>(total / divisor_);
  if (top.size() > 1) top[1]->data.copy_from(prob_);
}

void InfogainLossLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                     const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const int64_t C = geom_.channels, inner = geom_.inner;
  if (geom_.outer * inner == 0) return;  // nothing to write, and H may be empty
  const float* H = h_of(bottom).data<float>();
  sum_rows_.resize(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    double s = 0.0;
    for (int64_t k = 0; k < C; ++k) s += H[c * C + k];
    sum_rows_[static_cast<size_t>(c)] = static_cast<float>(s);
  }
  const float scale = static_cast<float>(top[0]->diff.data<float>()[0] / divisor_);
  const float* prob = prob_.data<float>();
  const float* dprob = top.size() > 1 ? top[1]->diff.data<float>() : nullptr;
  float* dx = bottom[0]->diff.data<float>();
  const int64_t chunk = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, C * inner));
  parallel_for(geom_.outer, chunk, [&](int64_t ob, int64_t oe) {
    for (int64_t o = ob; o < oe; ++o) {
      const int32_t* lo = labels_.data() + o * inner;
      for (int64_t c = 0; c < C; ++c) {
        const int64_t base = (o * C + c) * inner;
        for (int64_t i = 0; i < inner; ++i) {
          const int32_t l = lo[i];
          dx[base + i] = l < 0 ? 0.0f : (prob[base + i] * sum_rows_[static_cast<size_t>(l)] - H[l * C + c]) * scale;
        }
      }
      if (!dprob) continue;
      // A gradient on the probabilities top, through the softmax:
      // dx_c += p_c * (dp_c - sum_k dp_k p_k), per position.
      for (int64_t i = 0; i < inner; ++i) {
        double dot = 0.0;
        for (int64_t c = 0; c < C; ++c) {
          const int64_t k = (o * C + c) * inner + i;
          dot += static_cast<double>(dprob[k]) * prob[k];
        }
        for (int64_t c = 0; c < C; ++c) {
          const int64_t k = (o * C + c) * inner + i;
          dx[k] += prob[k] * (dprob[k] - static_cast<float>(dot));
        }
      }
    }
  });
}

STRATA_REGISTER_LAYER("InfogainLoss", InfogainLossLayer);

}  // namespace strata
