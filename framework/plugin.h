// Layer libraries built outside strata's tree (framework/plugin_api.h says
// how one is written), loaded into this process and their layers registered
// by name, next to the built-in ones: `strata train|test|time|embed|layers|
// check-layers --plugin PATH` (repeatable) or the STRATA_PLUGINS variable
// (paths separated by ':'; tools/strata/plugin_flags.cpp).
//
// A library is refused, with what to do, when it cannot be opened (the
// loader's own message: a missing file, an undefined symbol), when it is no
// strata layer library, when it was built against another strata (version,
// compiler, string ABI), when it registers no layer, and when a layer name it
// registers is taken (built in, or by another library); then none of its
// layers is registered. Loading one path twice is a no-op.
#pragma once

#include <string>
#include <vector>

namespace strata {

struct LoadedPlugin {
  std::string path;                // as given
  std::vector<std::string> types;  // the layer types it registered, in its order
  bool cuda = false;               // built with CUDA code (STRATA_WITH_CUDA)
};

// This build's STRATA_PLUGIN_ABI: what a library must have been built against.
const char* plugin_abi();

LoadedPlugin load_layer_plugin(const std::string& path);
const std::vector<LoadedPlugin>& loaded_plugins();

// STRATA_PLUGINS split at ':' (empty entries skipped).
std::vector<std::string> plugins_from_environment();

}  // namespace strata
