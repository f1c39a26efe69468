#include "layers/hdf5_data.h"


#include "framework/caffe/caffe_db.h"
#include "framework/data/hdf5_file.h"
#include "framework/error.h"

namespace strata {

Hdf5DataLayer::Hdf5DataLayer(const LayerSpec& spec, const LayerContext& ctx) : DataLayer(spec, ctx) {
  const ConfigNode& p = block("hdf5_data_param");
  source_ = caffe::resolve_caffe_path(ctx.base_dir, p.get_string("source"));
  options_.batch_size = p.get_int("batch_size");
  if (options_.batch_size <= 0) {
    fail<ConfigError>(where_at(), ": hdf5_data_param batch_size must be > 0, got ", options_.batch_size, " at ",
                      p.find("batch_size")->loc().str());
  }
  // Caffe's default: no shuffling, in either phase.
  options_.shuffle = p.get_bool("shuffle", false) ? ShuffleMode::kOn : ShuffleMode::kOff;
  options_.seed = p.has("seed") ? static_cast<uint64_t>(p.get_int("seed")) : rng_.next_u64();
  options_.shard = p.get_enum("shard", {"AUTO", "NONE"}, "AUTO") == "AUTO" ? ShardMode::kAuto : ShardMode::kNone;
  options_.rank = ctx.rank;
  options_.world_size = ctx.world_size;
  options_.datasets = spec.tops;
}

LayerSchema Hdf5DataLayer::schema() {
  LayerSchema s;
  s.kind = LayerKind::kData;
  s.blocks = {{"hdf5_data_param", {"source", "batch_size", "shuffle", "seed", "shard"}}};
  s.summary =
      "Caffe's HDF5Data: rows of the datasets named by the tops, from the .h5 files a list file names; "
      "shuffled files and rows on request, sharded per rank";
  return s;
}


void Hdf5DataLayer::setup(const BlobVec& /*bottom*/, const BlobVec& /*top*/) {
  if (!hdf5::available()) {
    fail<IoError>(where_at(), ": strata was built without libhdf5, so HDF5Data cannot read '", source_,
                  "'; install libhdf5-dev (apt-get install libhdf5-dev, or tools/install_deps.sh) and rebuild");
  }
  try {
    options_.files = hdf5::read_list_file(source_);
  } catch (const IoError& e) {
    fail<IoError>(where_at(), ": hdf5_data_param source: ", e.what());
  } catch (const ConfigError& e) {
    fail<ConfigError>(where_at(), ": ", e.what());
  }
  reader_ = std::make_unique<hdf5::Reader>(options_, where_at());
}

void Hdf5DataLayer::reshape(const BlobVec& /*bottom*/, const BlobVec& top) {
  if (!reader_) fail<Error>(where(), ": reshape before setup()");
  for (size_t i = 0; i < top.size(); ++i) {
    Shape s = reader_->row_shapes()[i];
    s.insert(s.begin(), options_.batch_size);
    top[i]->resize(s);
  }
}

// The reader writes each top's rows straight into `out`: the tops have the
// shapes reshape() gave them from the reader's row shapes.
void Hdf5DataLayer::next_batch(const BlobVec& top, const std::vector<float*>& out) {
  if (!reader_) fail<Error>(where(), ": forward before setup()");
  for (size_t i = 0; i < top.size(); ++i) {
    int64_t n = options_.batch_size;
    for (int64_t d : reader_->row_shapes()[i]) n *= d;
    STRATA_CHECK(n == top[i]->numel(), where(), ": the reader's batch for top ", i, " holds ", n, " values, the top ",
                 shape_str(top[i]->shape()));
  }
  reader_->next(out);
}

std::string Hdf5DataLayer::save_state() const {
  if (!reader_) fail<Error>(where(), ": used before setup()");
  return reader_->save_state();
}

void Hdf5DataLayer::load_state(const std::string& state) {
  if (!reader_) fail<Error>(where(), ": load_state() before setup()");
  reader_->load_state(state);
}

STRATA_REGISTER_LAYER("HDF5Data", Hdf5DataLayer);

}  // namespace strata
