#include "layers/image_data.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>

#include "framework/caffe/caffe_db.h"
#include "framework/error.h"
#include "framework/io/file_util.h"

namespace strata {

const std::vector<std::string>& image_transform_keys() {
  static const std::vector<std::string> keys = {"preset", "resize", "interpolation", "crop_size", "crop",
                                                "mirror", "scale",  "mean",          "std"};
  return keys;
}

ImageTransform read_image_transform(const ConfigNode& p, Phase phase, const std::string& where) {
  const std::string preset = p.get_enum("preset", {"NONE", "IMAGENET", "VIT_EVAL"}, "NONE");
  ImageTransform t = preset_transform(parse_transform_preset(preset));
  auto positive = [&](const char* key, int64_t def) {
    const int64_t v = p.get_int(key, def);
    if (v < 0 || v > 65535) {
      fail<ConfigError>(where, ": transform_param ", key, " must be in 0..65535, got ", v, " at ",
                        p.find(key)->loc().str());
    }
    return static_cast<int>(v);
  };
  t.resize = positive("resize", t.resize);
  if (p.has("interpolation")) {
    t.interpolation = p.get_enum("interpolation", {"BILINEAR", "BICUBIC"}, "BILINEAR") == "BICUBIC"
                          ? Interpolation::kBicubic
                          : Interpolation::kBilinear;
  }
  if (p.has("crop_size")) t.crop_height = t.crop_width = positive("crop_size", 0);
  const bool train = phase == Phase::kTrain;
  t.crop = train && p.get_enum("crop", {"CENTER", "RANDOM"}, "CENTER") == "RANDOM" ? CropMode::kRandom
                                                                                    : CropMode::kCenter;
  t.mirror = train && p.get_bool("mirror", false) ? MirrorMode::kRandom : MirrorMode::kOff;
  if (p.has("scale")) t.scale = p.get_double("scale");
  auto per_channel = [&](const char* key, std::vector<float>& out) {
    const std::vector<double> v = p.get_doubles(key);
    if (v.empty()) return;
    if (v.size() != 1 && v.size() != 3) {
      fail<ConfigError>(where, ": transform_param has ", v.size(), " '", key,
                        "' values; give one for all channels or three (R, G, B)");
    }
    for (size_t c = 0; c < 3; ++c) out[c] = static_cast<float>(v[v.size() == 1 ? 0 : c]);
  };
  per_channel("mean", t.mean);
  per_channel("std", t.std);
  for (float s : t.std) {
    if (!(s != 0.0f)) fail<ConfigError>(where, ": transform_param std must be non-zero");
  }
  return t;
}

namespace {

const std::vector<std::string>& caffe_only_data_keys() {
  static const std::vector<std::string> keys = {"new_height", "new_width", "is_color", "rand_skip"};
  return keys;
}
const std::vector<std::string>& caffe_only_transform_keys() {
  static const std::vector<std::string> keys = {"mean_file", "mean_value", "force_color", "force_gray"};
  return keys;
}
const std::vector<std::string>& torchvision_only_transform_keys() {
  static const std::vector<std::string> keys = {"preset", "resize", "interpolation", "crop", "mean", "std"};
  return keys;
}

bool has_any(const ConfigNode& node, const std::vector<std::string>& keys) {
  return std::any_of(keys.begin(), keys.end(), [&](const std::string& k) { return node.has(k); });
}

}  // namespace

ImageDataLayer::ImageDataLayer(const LayerSpec& spec, const LayerContext& ctx) : DataLayer(spec, ctx) {
  const ConfigNode& p = block("image_data_param");
  const ConfigNode& tp = block("transform_param");
  const bool caffe_keys = has_any(p, caffe_only_data_keys()) || has_any(tp, caffe_only_transform_keys());
  const bool torch_keys = has_any(tp, torchvision_only_transform_keys());
  if (caffe_keys && torch_keys) {
    fail<ConfigError>(where_at(), ": transform_param mixes Caffe's keys (new_height, new_width, is_color, "
                      "rand_skip, mean_file, mean_value, force_color, force_gray) with torchvision-style ones "
                      "(preset, resize, interpolation, crop, mean, std); use one convention");
  }
  if (caffe_keys) convention_ = Convention::kCaffe;
  source_ = convention_ == Convention::kCaffe ? caffe::resolve_caffe_path(ctx.base_dir, p.get_string("source"))
                                              : join_path(ctx.base_dir, p.get_string("source"));
  if (p.has("root_folder")) root_folder_ = join_path(ctx.base_dir, p.get_string("root_folder"));
  DataOptions data = read_data_options(p, ctx.phase, where());
  if (convention_ == Convention::kCaffe) {
    data.shuffle = p.get_bool("shuffle", false) ? ShuffleMode::kOn : ShuffleMode::kOff;  // Caffe's default
    caffe_transform_ = caffe::read_transform(tp, ctx.phase, ctx.base_dir, where_at());
    new_height_ = static_cast<int>(p.get_int("new_height", 0));
    new_width_ = static_cast<int>(p.get_int("new_width", 0));
    if ((new_height_ > 0) != (new_width_ > 0) || new_height_ < 0 || new_width_ < 0 || new_height_ > 65535 ||
        new_width_ > 65535) {
      fail<ConfigError>(where_at(), ": new_height and new_width go together (both > 0, or neither), got ",
                        new_height_, " and ", new_width_);
    }
    color_ = p.get_bool("is_color", true) ? caffe::ColorMode::kColor : caffe::ColorMode::kGray;
    rand_skip_ = p.get_int("rand_skip", 0);
    if (rand_skip_ < 0) fail<ConfigError>(where_at(), ": rand_skip must be >= 0, got ", rand_skip_);
  } else {
    transform_ = read_image_transform(tp, ctx.phase, where_at());
  }
  if (convention_ == Convention::kTorchvision && (transform_.crop_height <= 0 || transform_.crop_width <= 0)) {
    fail<ConfigError>(where_at(), ": every image must become the same size; set transform_param { crop_size: N } "
                                  "(or preset: IMAGENET / VIT_EVAL, which crop 224), or, in Caffe's spelling, "
                                  "image_data_param { new_height: H new_width: W }");
  }
  options_.batch_size = data.batch_size;
  options_.shuffle = data.shuffle;
  options_.seed = data.seed ? *data.seed : rng_.next_u64();
  options_.shard = data.shard;
  options_.rank = ctx.rank;
  options_.world_size = ctx.world_size;
  const int64_t threads = p.get_int("threads", 0);
  const int64_t prefetch = p.get_int("prefetch", 2);
  if (threads < 0 || threads > 1024) fail<ConfigError>(where_at(), ": threads must be 0 (auto) .. 1024, got ", threads);
  if (prefetch < 1 || prefetch > 1024) fail<ConfigError>(where_at(), ": prefetch must be 1 .. 1024, got ", prefetch);
  options_.threads = static_cast<int>(threads);
  options_.prefetch = static_cast<int>(prefetch);
  options_.bad_images = p.get_bool("skip_bad_images", false) ? BadImages::kSkip : BadImages::kError;
  options_.epochs = EpochMode::kRepeat;
  options_.out_height = transform_.crop_height;
  options_.out_width = transform_.crop_width;
}

LayerSchema ImageDataLayer::schema() {
  LayerSchema s;
  s.kind = LayerKind::kData;
  std::vector<std::string> keys = {"source", "root_folder", "skip_bad_images", "threads", "prefetch"};
  keys.insert(keys.end(), data_option_keys().begin(), data_option_keys().end());
  keys.insert(keys.end(), caffe_only_data_keys().begin(), caffe_only_data_keys().end());
  std::vector<std::string> transform = image_transform_keys();
  transform.insert(transform.end(), caffe_only_transform_keys().begin(), caffe_only_transform_keys().end());
  s.blocks = {{"image_data_param", keys}, {"transform_param", transform}};
  s.summary =
      "Reads JPEG/PNG/BMP images from class subfolders or a 'path label' list; resize, crop, flip and "
      "normalise as torchvision/timm presets; decoded on threads ahead of use";
  return s;
}


void ImageDataLayer::setup(const BlobVec& /*bottom*/, const BlobVec& top) {
  std::vector<ImageItem> items;
  ImageWalkNotes left_out;
  try {
    items = read_image_source(source_, root_folder_, &left_out);
  } catch (const IoError& e) {
    fail<IoError>(where_at(), ": ", e.what());
  } catch (const ConfigError& e) {
    fail<ConfigError>(where_at(), ": ", e.what());
  }
  if (top.size() > 1) {
    for (const ImageItem& item : items) {
      if (item.label < 0) {
        fail<ConfigError>(where_at(), ": a label top needs a label for every image, but '", item.path,
                          "' has none; write 'path label' lines in the list file, or drop the label top");
      }
    }
  }
  // What was found, once per job: a wrong folder or list shows at once.
  if (ctx_.rank == 0) {
    std::set<int64_t> classes;
    for (const ImageItem& item : items) {
      if (item.label >= 0) classes.insert(item.label);
    }
    std::fprintf(stderr, "note: %s: %zu images from '%s'%s\n", where_at().c_str(), items.size(), source_.c_str(),
                 classes.empty() ? "" : (" in " + std::to_string(classes.size()) + " classes").c_str());
    for (const std::string& line : left_out.lines()) {
      std::fprintf(stderr, "note: %s: %s\n", where_at().c_str(), line.c_str());
    }
  }
  if (convention_ == Convention::kCaffe) setup_caffe(items);
  loader_ = std::make_unique<ImageLoader>(std::move(items), transform_, options_, where_at());
  if (rand_skip_ > 0) {
    // Caffe skips a random number of list lines before the first batch.
    Rng skip(options_.seed ^ 0x72616e645f736b69ULL);
    loader_->seek(static_cast<int64_t>(skip.uniform_int(static_cast<uint64_t>(rand_skip_))));
  }
}

void ImageDataLayer::setup_caffe(const std::vector<ImageItem>& items) {
  const std::string where = where_at();
  const caffe::Transform t = caffe_transform_;
  const int new_h = new_height_, new_w = new_width_;
  const caffe::ColorMode color = color_;
  auto prepare = [=](const RgbImage& rgb) {
    caffe::Image img = caffe::from_rgb(rgb, color);
    return new_h > 0 ? caffe::resize_linear(img, new_h, new_w) : img;
  };
  // The output size: the crop, else the new size, else the first image's (as Caffe infers its top).
  caffe::Image first;
  first.channels = color == caffe::ColorMode::kGray ? 1 : 3;
  first.height = new_h;
  first.width = new_w;
  if (new_h == 0 && t.crop_size == 0) {
    try {
      first = prepare(decode_image_file(items.at(0).path));
    } catch (const IoError& e) {
      fail<IoError>(where, ": ", e.what());
    }
  }
  int out_h = t.crop_size, out_w = t.crop_size;
  if (t.crop_size == 0) {
    out_h = first.height;
    out_w = first.width;
  }
  options_.out_channels = first.channels;
  options_.out_height = out_h;
  options_.out_width = out_w;
  options_.custom_transform = [=](const RgbImage& rgb, const std::string& path, Rng& rng, float* out) {
    const caffe::Image img = prepare(rgb);
    int h = 0, w = 0;
    caffe::output_size(t, img, &h, &w, where + ": " + path);
    if (h != out_h || w != out_w) {
      fail<ConfigError>(where, ": ", path, " (", rgb.width, "x", rgb.height, ") becomes ", w, "x", h,
                        " but the first image made ", out_w, "x", out_h, "; set image_data_param { new_height "
                        "new_width } or transform_param { crop_size } so that every image has one size");
    }
    caffe::apply(t, img, &rng, out, where + ": " + path);
  };
}

void ImageDataLayer::reshape(const BlobVec& /*bottom*/, const BlobVec& top) {
  top[0]->resize({options_.batch_size, options_.out_channels, options_.out_height, options_.out_width});
  if (top.size() > 1) top[1]->resize({options_.batch_size});
}

void ImageDataLayer::next_batch(const BlobVec& top, const std::vector<float*>& out) {
  if (!loader_) fail<Error>(where(), ": forward before setup()");
  loader_->next(batch_);  // kRepeat: always a full batch
  copy_batch(batch_.data, *top[0], out[0], "data");
  if (top.size() > 1) copy_batch(batch_.labels, *top[1], out[1], "labels");
}

const ImageLoader& ImageDataLayer::loader() const {
  if (!loader_) fail<Error>(where(), ": used before setup()");
  return *loader_;
}

// State text:
//   strata_image_data 1
//   images <N> rank <r> world_size <w> shard <n> seed <s>
//   position <p>
//   skipped <item indices...>
std::string ImageDataLayer::save_state() const {
  const ImageLoader& l = loader();
  std::ostringstream os;
  os << "strata_image_data 1\nimages " << l.items().size() << " rank " << options_.rank << " world_size "
     << options_.world_size << " shard " << l.shard().size() << " seed " << options_.seed << "\nposition "
     << l.position() << "\nskipped";
  for (int64_t i : l.skipped()) os << ' ' << i;
  os << "\n";
  return os.str();
}

void ImageDataLayer::load_state(const std::string& state) {
  if (!loader_) fail<Error>(where(), ": load_state() before setup()");
  auto corrupt = [&](const std::string& what) {
    fail<Error>(where_at(), ": cannot restore the image reader from the snapshot: ", what);
  };
  std::istringstream is(state);
  std::string tag, k1, k2, k3, k4;
  int version = 0;
  size_t images = 0, shard = 0;
  int rank = 0, world = 0;
  uint64_t seed = 0;
  int64_t position = -1;
  if (!(is >> tag >> version) || tag != "strata_image_data" || version != 1) corrupt("not an ImageData state");
  if (!(is >> tag >> images >> k1 >> rank >> k2 >> world >> k3 >> shard >> k4 >> seed) || tag != "images" ||
      k1 != "rank" || k2 != "world_size" || k3 != "shard" || k4 != "seed") {
    corrupt("malformed 'images' line");
  }
  if (!(is >> tag >> position) || tag != "position" || position < 0) corrupt("malformed 'position' line");
  if (!(is >> tag) || tag != "skipped") corrupt("missing 'skipped' line");
  std::set<int64_t> skipped;
  int64_t v;
  while (is >> v) {
    if (v < 0 || v >= static_cast<int64_t>(images)) corrupt("skipped image index out of range");
    skipped.insert(v);
  }
  if (images != loader_->items().size()) {
    corrupt("it was saved for " + std::to_string(images) + " images, the source now has " +
            std::to_string(loader_->items().size()));
  }
  if (shard != loader_->shard().size() || rank != options_.rank || world != options_.world_size) {
    corrupt("it was saved by rank " + std::to_string(rank) + " of " + std::to_string(world) +
            "; this is rank " + std::to_string(options_.rank) + " of " + std::to_string(options_.world_size) +
            "; resume with the same number of ranks");
  }
  if (seed != options_.seed) corrupt("it was saved with another seed; resume with the same seed");
  loader_->set_skipped(skipped);
  loader_->seek(position);
}

STRATA_REGISTER_LAYER("ImageData", ImageDataLayer);

}  // namespace strata
