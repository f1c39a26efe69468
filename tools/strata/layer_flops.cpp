#include "tools/strata/layer_flops.h"

#include <vector>

#include "framework/error.h"

namespace strata::cli {

namespace {

constexpr double kBackwardPerForward = 2.0;

}  // namespace

void add_layer_flops(const Net& net, estimate::StepProfile* profile) {
  STRATA_CHECK(static_cast<int>(profile->layers.size()) == net.num_layers(), "the profile has ",
               profile->layers.size(), " layers, the net ", net.num_layers());
  for (int i = 0; i < net.num_layers(); ++i) {
    estimate::LayerProfile& l = profile->layers[i];
    l.flops = net.layer(i).forward_cost(net.bottoms(i), net.tops(i)).flops;  // as the layer declares it
    l.backward_flops = net.layer_needs_backward(i) ? kBackwardPerForward * l.flops : 0.0;
  }
}

}  // namespace strata::cli
