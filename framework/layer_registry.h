// Layer types registered by name. A layer's .cpp registers itself:
//   STRATA_REGISTER_LAYER("Convolution", ConvolutionLayer);
// where ConvolutionLayer has `static LayerSchema schema();`.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/layer.h"

namespace strata {

using LayerFactory = std::function<std::unique_ptr<Layer>(const LayerSpec&, const LayerContext&)>;

struct LayerRegistration {
  std::string type;
  LayerFactory create;
  LayerSchema (*schema)();
  std::string origin;  // the layer library it came from (framework/plugin.h); empty: built in
};

// The registration of layer class L (constructor (spec, ctx), static schema()).
template <class L>
LayerRegistration layer_registration(std::string type) {
  return LayerRegistration{
      std::move(type),
      [](const LayerSpec& spec, const LayerContext& ctx) -> std::unique_ptr<Layer> {
        return std::make_unique<L>(spec, ctx);
      },
      &L::schema, std::string()};
}

class LayerRegistry {
 public:
  static LayerRegistry& instance();
  // Error on a duplicate name (lists the known types).
  void add(LayerRegistration reg);
  // Forgets a type; nothing if it is not registered. Only for
  // ScopedLayerRegistration: a real layer stays registered for the process.
  void remove(const std::string& type) noexcept;
  // ConfigError for an unknown type, listing the known ones and the nearest.
  const LayerRegistration& find(const std::string& type) const;
  bool has(const std::string& type) const;
  std::vector<std::string> types() const;  // sorted

 private:
  std::vector<LayerRegistration> regs_;
};

struct LayerRegistrar {
  explicit LayerRegistrar(LayerRegistration reg) { LayerRegistry::instance().add(std::move(reg)); }
};

// A type registered for as long as this object lives: for tests that need a
// layer no real type provides (a new kind of norm, say) without enrolling it
// in the tests that walk every registered type.
class ScopedLayerRegistration {
 public:
  explicit ScopedLayerRegistration(LayerRegistration reg) : type_(reg.type) {
    LayerRegistry::instance().add(std::move(reg));
  }
  ~ScopedLayerRegistration() { LayerRegistry::instance().remove(type_); }
  ScopedLayerRegistration(const ScopedLayerRegistration&) = delete;
  ScopedLayerRegistration& operator=(const ScopedLayerRegistration&) = delete;

 private:
  std::string type_;
};

}  // namespace strata

#define STRATA_LAYER_CONCAT_INNER(a, b) a##b
#define STRATA_LAYER_CONCAT(a, b) STRATA_LAYER_CONCAT_INNER(a, b)
#ifndef STRATA_BUILDING_PLUGIN
#define STRATA_REGISTER_LAYER(type_name, Class)                                          \
  static ::strata::LayerRegistrar STRATA_LAYER_CONCAT(strata_layer_registrar_, __LINE__)( \
      ::strata::layer_registration<Class>(type_name))
#else
// In a layer library built outside the tree (framework/plugin_api.h): the
// registration waits until strata has accepted the library.
#define STRATA_REGISTER_LAYER(type_name, Class)                                                \
  static ::strata::PluginLayerRegistrar STRATA_LAYER_CONCAT(strata_layer_registrar_, __LINE__)( \
      ::strata::layer_registration<Class>(type_name))
#endif

#ifdef STRATA_BUILDING_PLUGIN
#include "framework/plugin_api.h"
#endif
