#include "framework/plugin.h"

#include <dlfcn.h>

#include <cstdlib>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/plugin_api.h"

namespace strata {

namespace {


std::vector<LoadedPlugin>& loaded_list() {
  static std::vector<LoadedPlugin> list;
  return list;
}

std::string origin_text(const std::string& origin) { return origin.empty() ? "built in" : "from " + origin; }

// Closes the library unless released (once its layers are registered, its
// code must stay).
class Library {
 public:
  explicit Library(void* handle) : handle_(handle) {}
  ~Library() {
    if (handle_) dlclose(handle_);
  }
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  void* symbol(const char* name) const { return dlsym(handle_, name); }
  void release() { handle_ = nullptr; }

 private:
  void* handle_;
};

}  // namespace

const char* plugin_abi() { return STRATA_PLUGIN_ABI; }

const std::vector<LoadedPlugin>& loaded_plugins() { return loaded_list(); }

LoadedPlugin load_layer_plugin(const std::string& path) {
  for (const LoadedPlugin& p : loaded_list()) {
    if (p.path == path) return p;
  }
  const std::string what = "layer library '" + path + "'";
  // A bare name would be searched on the loader's path; a plugin is a file.
  const std::string file = path.find('/') == std::string::npos ? "./" + path : path;
  dlerror();
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* err = dlerror();
    fail<ConfigError>("cannot load ", what, ": ", err ? err : "dlopen failed",
                      " (an undefined symbol usually means it was built against another strata, or with CUDA code "
                      "against a strata built without CUDA: rebuild it against this strata with find_package(strata))");
  }
  Library lib(handle);
  if (!lib.symbol("strata_plugin_abi")) {
    fail<ConfigError>(what, " is no strata layer library: it defines no strata_plugin_abi (build it with "
                      "find_package(strata) and put STRATA_PLUGIN(); in one of its .cpp files)");
  }
  using AbiFn = const char* (*)();
  using CudaFn = int (*)();
  using LayersFn = std::vector<LayerRegistration>* (*)();
  const std::string abi = reinterpret_cast<AbiFn>(lib.symbol("strata_plugin_abi"))();
  if (abi != plugin_abi()) {
    fail<ConfigError>(what, " was built against ", abi, "; this strata is ", plugin_abi(),
                      ": rebuild it against this strata (find_package(strata) with CMAKE_PREFIX_PATH set to "
                      "where this strata is installed)");
  }
  auto layers_fn = reinterpret_cast<LayersFn>(lib.symbol("strata_plugin_layers"));
  auto cuda_fn = reinterpret_cast<CudaFn>(lib.symbol("strata_plugin_cuda"));
  if (!layers_fn || !cuda_fn) fail<ConfigError>(what, " lacks strata_plugin_layers; is STRATA_PLUGIN() in it?");
  std::vector<LayerRegistration>& layers = *layers_fn();
  if (layers.empty()) {
    fail<ConfigError>(what, " registers no layer: add STRATA_REGISTER_LAYER(\"Name\", Class) beside each layer, "
                      "and build it with find_package(strata)'s target, which defines STRATA_BUILDING_PLUGIN");
  }
  LayerRegistry& registry = LayerRegistry::instance();
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string& type = layers[i].type;
    if (registry.has(type)) {
      fail<ConfigError>(what, " registers layer type '", type, "', which is taken (", origin_text(registry.find(type).origin),
                        "): rename the layer in the library");
    }
    for (size_t j = 0; j < i; ++j) {
      if (layers[j].type == type) fail<ConfigError>(what, " registers layer type '", type, "' twice");
    }
  }
  LoadedPlugin loaded_plugin;
  loaded_plugin.path = path;
  loaded_plugin.cuda = cuda_fn() != 0;
  for (LayerRegistration& reg : layers) {
    reg.origin = path;
    loaded_plugin.types.push_back(reg.type);
    registry.add(reg);
  }
  lib.release();
  loaded_list().push_back(loaded_plugin);
  return loaded_plugin;
}

std::vector<std::string> plugins_from_environment() {
  std::vector<std::string> out;
  const char* v = std::getenv("STRATA_PLUGINS");
  if (!v) return out;
  std::string s = v;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = s.find(':', start);
    const std::string part = s.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!part.empty()) out.push_back(part);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

}  // namespace strata
