// The layer types of BVLC Caffe (its src/caffe/layers, as registered by
// REGISTER_LAYER_CLASS). The one list strata keeps of them: an unknown type
// that is on it is a Caffe layer strata does not implement yet, and the
// error says so instead of suggesting an unrelated name ("Deconvolution":
// did you mean "Convolution"?). Whether strata implements one is never
// written here: the layer registry says, so the message stays right as layers
// are added.
#pragma once

#include <string>
#include <vector>

namespace strata {

const std::vector<std::string>& caffe_layer_types();
bool is_caffe_layer_type(const std::string& type);

}  // namespace strata
