#include "layers/in_memory_data.h"

#include <utility>

#include "framework/error.h"
#include "framework/io/input_path.h"

namespace strata {

InMemoryDataLayer::InMemoryDataLayer(const LayerSpec& spec, const LayerContext& ctx,
                                     std::string param_block)
    : DataLayer(spec, ctx), param_block_(std::move(param_block)) {
  options_ = read_data_options(data_param(), ctx.phase, where());
  transform_ = read_transform(block("transform_param"));
}


std::string InMemoryDataLayer::resolve(const std::string& path) const {
  return find_input_path(path, ctx_.base_dir, LookFirst::kBesideFile).path;
}

void InMemoryDataLayer::setup(const BlobVec& /*bottom*/, const BlobVec& top) {
  InMemoryData data;
  try {
    data = load();
  } catch (const IoError& e) {
    fail<IoError>(where_at(), ": ", e.what());
  }
  if (top.size() > 1 && data.labels.empty()) {
    fail<ConfigError>(where_at(), ": a second top (label) needs labels; set label_source in ",
                      param_block_, " or drop the top");
  }
  source_ = std::make_unique<DataSource>(std::move(data), options_, transform_, rng_, ctx_.rank,
                                         ctx_.world_size, where_at());
}

void InMemoryDataLayer::reshape(const BlobVec& /*bottom*/, const BlobVec& top) {
  top[0]->resize(source().batch_shape());
  if (top.size() > 1) top[1]->resize({source().batch_size()});
}

void InMemoryDataLayer::next_batch(const BlobVec& /*top*/, const std::vector<float*>& out) {
  if (!source_) fail<Error>(where(), ": forward before setup()");
  source_->next_batch(out[0], out.size() > 1 ? out[1] : nullptr);
}

const DataSource& InMemoryDataLayer::source() const {
  if (!source_) fail<Error>(where(), ": used before setup()");
  return *source_;
}

std::string InMemoryDataLayer::save_state() const { return source().save_state(); }

void InMemoryDataLayer::load_state(const std::string& state) {
  if (!source_) fail<Error>(where(), ": load_state() before setup()");
  source_->load_state(state);
}

}  // namespace strata
