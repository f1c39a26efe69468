// Layer types registered by name. A layer's .cpp registers itself:
//   STRATA_REGISTER_LAYER("Convolution", ConvolutionLayer);
// where ConvolutionLayer has `static LayerSchema schema();`.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "framework/layer.h"

namespace strata {

using LayerFactory = std::function<std::unique_ptr<Layer>(const LayerSpec&, const LayerContext&)>;

struct LayerRegistration {
  std::string type;
  LayerFactory create;
  LayerSchema (*schema)();
};

class LayerRegistry {
 public:
  static LayerRegistry& instance();
  // Error on a duplicate name (lists the known types).
  void add(LayerRegistration reg);
  // ConfigError for an unknown type, listing the known ones and the nearest.
  const LayerRegistration& find(const std::string& type) const;
  bool has(const std::string& type) const;
  std::vector<std::string> types() const;  // sorted

 private:
  std::vector<LayerRegistration> regs_;
};

struct LayerRegistrar {
  LayerRegistrar(const char* type, LayerFactory create, LayerSchema (*schema)()) {
    LayerRegistry::instance().add(LayerRegistration{type, std::move(create), schema});
  }
};

}  // namespace strata

#define STRATA_LAYER_CONCAT_INNER(a, b) a##b
#define STRATA_LAYER_CONCAT(a, b) STRATA_LAYER_CONCAT_INNER(a, b)
#define STRATA_REGISTER_LAYER(type_name, Class)                                          \
  static ::strata::LayerRegistrar STRATA_LAYER_CONCAT(strata_layer_registrar_, __LINE__)( \
      type_name,                                                                         \
      [](const ::strata::LayerSpec& spec, const ::strata::LayerContext& ctx)             \
          -> std::unique_ptr<::strata::Layer> { return std::make_unique<Class>(spec, ctx); }, \
      &Class::schema)
