// What a layer library built outside strata's tree compiles against: the
// same Layer, schema and registration line as a built-in layer, and one
// STRATA_PLUGIN() line in one of its .cpp files. `strata ... --plugin
// lib.so` (or STRATA_PLUGINS) loads it (framework/plugin.h); `find_package(strata)` gives a project the headers
// and the definitions, and defines STRATA_BUILDING_PLUGIN, under which
// STRATA_REGISTER_LAYER collects the library's layers instead of registering
// them while the library loads: strata first checks that the library was
// built against this strata (STRATA_PLUGIN_ABI), then registers them,
// refusing a name that is taken.
//
//   // my_layers/swish.cpp
//   #include "framework/plugin_api.h"
//   class SwishLayer : public strata::Layer { ... static strata::LayerSchema schema(); };
//   STRATA_REGISTER_LAYER("Swish", SwishLayer);
//   STRATA_PLUGIN();  // once per library
#pragma once

#include <vector>

#include "framework/layer_registry.h"

// Two builds of strata agree on this exactly, or a library built against one
// is refused by the other: the version, the Layer interface's revision, the
// compiler's major version and the standard library's string ABI (the Layer
// interface passes std::string and std::vector across the boundary).
#define STRATA_PLUGIN_STR_INNER(x) #x
#define STRATA_PLUGIN_STR(x) STRATA_PLUGIN_STR_INNER(x)
#ifndef STRATA_VERSION
#define STRATA_VERSION "unknown"
#endif
// The Layer class's revision within a version: raised whenever its virtual
// functions or members change, so that a library built before is refused
// instead of calling through a different table (2: scratch_bytes and
// kept_bytes, 2026-11-27; 3: the planned scratch place, 2026-11-28;
// 4: takes_storage, the blobs' storage dtype, 2026-11-28; 5: call_dtype,
// 2026-11-28; 6: LayerSchema::storage_roundings and
// tops_overwritten_later, 2026-11-29; 7: bottom_stays_f32 and
// top_stays_f32, 2026-11-29; 8: the epilogues, 2026-11-29; 9: replays_in_a_graph,
// before_replay, the residual sum and tops_may_share_bottom, 2026-11-29;
// 10: channels_last and call_layout, 2026-11-29).
#define STRATA_LAYER_INTERFACE "10"
#define STRATA_PLUGIN_ABI                                                                         \
  "strata " STRATA_VERSION ", layer interface " STRATA_LAYER_INTERFACE ", g++ " STRATA_PLUGIN_STR( \
      __GNUC__) ", cxx11 abi " STRATA_PLUGIN_STR(_GLIBCXX_USE_CXX11_ABI)

namespace strata {

// The layers a library collected (STRATA_REGISTER_LAYER under
// STRATA_BUILDING_PLUGIN), handed to strata once it accepted the library.
std::vector<LayerRegistration>& plugin_layers();

struct PluginLayerRegistrar {
  explicit PluginLayerRegistrar(LayerRegistration reg) { plugin_layers().push_back(std::move(reg)); }
};

}  // namespace strata

#ifdef STRATA_WITH_CUDA
#define STRATA_PLUGIN_CUDA 1
#else
#define STRATA_PLUGIN_CUDA 0
#endif

// Once per library: what strata asks of it (framework/plugin.cpp).
#define STRATA_PLUGIN()                                                                          \
  namespace strata {                                                                             \
  std::vector<LayerRegistration>& plugin_layers() {                                              \
    static std::vector<LayerRegistration> layers;                                                \
    return layers;                                                                               \
  }                                                                                              \
  }                                                                                              \
  extern "C" const char* strata_plugin_abi() { return STRATA_PLUGIN_ABI; }                       \
  extern "C" int strata_plugin_cuda() { return STRATA_PLUGIN_CUDA; }                             \
  extern "C" std::vector<::strata::LayerRegistration>* strata_plugin_layers() {                  \
    return &::strata::plugin_layers();                                                           \
  }                                                                                              \
  static_assert(true, "STRATA_PLUGIN() ends with a semicolon")
