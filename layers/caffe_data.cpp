#include "layers/caffe_data.h"


#include "framework/io/input_path.h"
#include "framework/error.h"

namespace strata {

namespace {

// data_param keys Caffe moved into transform_param in 2014; its upgrade
// still accepts them where they were, and so does this layer.
const std::vector<std::string>& legacy_transform_keys() {
  static const std::vector<std::string> keys = {"scale", "mean_file", "crop_size", "mirror"};
  return keys;
}

}  // namespace

CaffeDataLayer::CaffeDataLayer(const LayerSpec& spec, const LayerContext& ctx) : DataLayer(spec, ctx) {
  const ConfigNode& p = block("data_param");
  options_.source = caffe::resolve_caffe_path(ctx.base_dir, p.get_string("source"));
  if (find_input_path(p.get_string("source"), ctx.base_dir).found == FoundIn::kNowhere) {
    // Caffe's paths are relative to the working directory (its root); say where both spellings were looked for.
    source_places_ = input_path_places(p.get_string("source"), ctx.base_dir);
  }
  options_.backend = caffe::parse_db_backend(p.get_enum("backend", {"LEVELDB", "LMDB"}, "LEVELDB"));
  options_.batch_size = p.get_int("batch_size");
  if (options_.batch_size <= 0) {
    fail<ConfigError>(where_at(), ": data_param batch_size must be > 0, got ", options_.batch_size, " at ",
                      p.find("batch_size")->loc().str());
  }
  options_.rand_skip = p.get_int("rand_skip", 0);
  if (options_.rand_skip < 0) fail<ConfigError>(where_at(), ": data_param rand_skip must be >= 0");
  const int64_t prefetch = p.get_int("prefetch", 4);
  if (prefetch < 1 || prefetch > 1024) {
    fail<ConfigError>(where_at(), ": data_param prefetch must be 1 .. 1024, got ", prefetch);
  }
  options_.prefetch = static_cast<int>(prefetch);
  options_.seed = p.has("seed") ? static_cast<uint64_t>(p.get_int("seed")) : rng_.next_u64();
  options_.shard = p.get_enum("shard", {"AUTO", "NONE"}, "AUTO") == "AUTO" ? ShardMode::kAuto : ShardMode::kNone;
  options_.rank = ctx.rank;
  options_.world_size = ctx.world_size;
  options_.transform = caffe::read_transform(block("transform_param"), ctx.phase, ctx.base_dir, where_at());
  bool legacy = false;
  for (const std::string& key : legacy_transform_keys()) legacy = legacy || p.has(key);
  if (legacy) {
    const caffe::Transform old = caffe::read_transform(p, ctx.phase, ctx.base_dir, where_at());
    if (p.has("scale")) options_.transform.scale = old.scale;
    if (p.has("mean_file")) {
      options_.transform.mean = old.mean;
      options_.transform.mean_file = old.mean_file;
    }
    if (p.has("crop_size")) options_.transform.crop_size = old.crop_size;
    if (p.has("mirror")) options_.transform.mirror = old.mirror;
  }
  if (p.get_bool("force_encoded_color", false)) options_.transform.color = caffe::ColorMode::kColor;
}

LayerSchema CaffeDataLayer::schema() {
  LayerSchema s;
  s.kind = LayerKind::kData;
  std::vector<std::string> keys = {"source", "backend", "batch_size", "rand_skip", "prefetch",
                                   "seed",   "shard",   "force_encoded_color"};
  keys.insert(keys.end(), legacy_transform_keys().begin(), legacy_transform_keys().end());
  s.blocks = {{"data_param", keys}, {"transform_param", caffe::transform_keys()}};
  s.summary =
      "Caffe's Data layer: Datum records (raw or JPEG/PNG) from an LMDB or LevelDB database, with Caffe's "
      "transform_param (mean file, crop, mirror, scale); prefetched, sharded per rank";
  return s;
}


void CaffeDataLayer::setup(const BlobVec& /*bottom*/, const BlobVec& /*top*/) {
  try {
    reader_ = std::make_unique<caffe::DatumReader>(options_, where_at());
  } catch (const IoError& e) {
    if (source_places_.empty()) throw;
    fail<IoError>(e.what(), ". The source exists in neither place looked at: ", source_places_,
                  "; Caffe's example databases are made by its scripts (e.g. examples/mnist/create_mnist.sh, "
                  "run from the Caffe root)");
  }
}

void CaffeDataLayer::reshape(const BlobVec& /*bottom*/, const BlobVec& top) {
  Shape s = reader().sample_shape();
  s.insert(s.begin(), options_.batch_size);
  top[0]->resize(s);
  if (top.size() > 1) top[1]->resize({options_.batch_size});
}

void CaffeDataLayer::next_batch(const BlobVec& top, const std::vector<float*>& out) {
  if (!reader_) fail<Error>(where(), ": forward before setup()");
  reader_->next(&data_, &labels_);
  copy_batch(data_, *top[0], out[0], "data");
  if (top.size() > 1) copy_batch(labels_, *top[1], out[1], "labels");
}

const caffe::DatumReader& CaffeDataLayer::reader() const {
  if (!reader_) fail<Error>(where(), ": used before setup()");
  return *reader_;
}

std::string CaffeDataLayer::save_state() const { return reader().save_state(); }

void CaffeDataLayer::load_state(const std::string& state) {
  if (!reader_) fail<Error>(where(), ": load_state() before setup()");
  reader_->load_state(state);
}

STRATA_REGISTER_LAYER("Data", CaffeDataLayer);

}  // namespace strata
