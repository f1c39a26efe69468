#include "tools/strata/layer_flops.h"

#include <vector>

#include "framework/error.h"

namespace strata::cli {

namespace {

constexpr double kBackwardPerForward = 2.0;

double numel(const Shape& s) {
  double n = 1;
  for (int64_t d : s) n *= static_cast<double>(d);
  return n;
}

// Output positions of a blob: all but the feature dimension (C of NCHW, the
// last of anything else).
double positions(const Shape& s) {
  if (s.empty()) return 0;
  const int64_t features = s.size() == 4 ? s[1] : s.back();
  return features > 0 ? numel(s) / static_cast<double>(features) : 0;
}

double forward_flops(const Net& net, int i, double weights) {
  const Layer& layer = net.layer(i);
  const std::string& type = layer.type();
  const BlobVec& tops = net.tops(i);
  const BlobVec& bottoms = net.bottoms(i);
  const bool matmul = type == "Convolution" || type == "InnerProduct" || type == "PatchEmbed" ||
                      type == "MultiHeadAttention" || type == "Deconvolution";
  if (matmul && !tops.empty()) {
    const Shape& out = type == "Deconvolution" && !bottoms.empty() ? bottoms[0]->shape() : tops[0]->shape();
    double f = 2 * weights * positions(out);
    if (type == "MultiHeadAttention" && out.size() == 3) {
      // QK^T and the weighted sum of V: 2 · N·T·T·D each.
      f += 4 * static_cast<double>(out[0]) * static_cast<double>(out[1]) * static_cast<double>(out[1]) *
           static_cast<double>(out[2]);
    }
    return f;
  }
  if (bottoms.empty()) return 0;  // an input or data layer computes nothing the step waits on here
  double f = 0;
  for (const Blob* t : tops) f += static_cast<double>(t->numel());
  return f;
}

}  // namespace

void add_layer_flops(const Net& net, estimate::StepProfile* profile) {
  STRATA_CHECK(static_cast<int>(profile->layers.size()) == net.num_layers(), "the profile has ",
               profile->layers.size(), " layers, the net ", net.num_layers());
  // Weights (parameters of two or more dimensions) by owning layer; biases
  // and norms' scales add too little to count.
  std::vector<double> weights(net.num_layers(), 0.0);
  for (const NetParam& p : net.params()) {
    if (p.owner_layer >= 0 && p.blob->shape().size() >= 2) weights.at(p.owner_layer) += static_cast<double>(p.blob->numel());
  }
  for (int i = 0; i < net.num_layers(); ++i) {
    estimate::LayerProfile& l = profile->layers[i];
    l.flops = forward_flops(net, i, weights[i]);
    l.backward_flops = net.layer_needs_backward(i) ? kBackwardPerForward * l.flops : 0.0;
  }
}

}  // namespace strata::cli
