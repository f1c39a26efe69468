#include "transfer/feature_extractor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <memory>
#include <sstream>
#include <cerrno>

#include "framework/config/config.h"
#include "framework/error.h"
#include "framework/io/file_util.h"
#include "framework/net.h"
#include "transfer/batch_pipeline.h"
#include "framework/data/image_loader.h"

namespace strata::transfer {

EmbedPool parse_embed_pool(const std::string& text, const std::string& flag) {
  if (text == "none") return EmbedPool::kNone;
  if (text == "avg") return EmbedPool::kAvg;
  if (text == "token") return EmbedPool::kToken;
  fail<ConfigError>(flag, ": unknown pooling '", text, "'; use none, avg or token");
}

int64_t embed_dim(const Shape& shape, EmbedPool pool, const std::string& blob) {
  if (shape.empty()) fail<ShapeError>("blob '", blob, "' is a scalar; pick a blob with a batch axis");
  switch (pool) {
    case EmbedPool::kNone:
      return shape_numel(Shape(shape.begin() + 1, shape.end()));
    case EmbedPool::kAvg:
      if (shape.size() == 4 || shape.size() == 3) return shape[1 + (shape.size() == 3)];
      if (shape.size() == 2) return shape[1];
      fail<ShapeError>("--pool avg takes [N, C, H, W] (mean over H, W) or [N, T, D] (mean over tokens); blob '",
                       blob, "' is ", shape_str(shape));
    case EmbedPool::kToken:
      if (shape.size() == 3) return shape[2];
      fail<ShapeError>("--pool token takes [N, T, D] (token 0, the class token); blob '", blob, "' is ",
                       shape_str(shape), "; use --pool avg or none");
  }
  return 0;
}

void pool_rows(const Tensor& blob, int64_t rows, EmbedPool pool, L2Norm norm, float* out) {
  pool_rows(blob.shape(), blob.data<float>(), rows, pool, norm, out);
}

void pool_rows(const Shape& s, const float* in, int64_t rows, EmbedPool pool, L2Norm norm, float* out) {
  const int64_t dim = embed_dim(s, pool, "?");
  STRATA_CHECK(rows <= s[0], "rows ", rows, " > batch ", s[0]);
  const int64_t per_row = shape_numel(Shape(s.begin() + 1, s.end()));
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = in + r * per_row;
    float* o = out + r * dim;
    if (pool == EmbedPool::kNone || (pool == EmbedPool::kAvg && s.size() == 2)) {
      std::memcpy(o, x, static_cast<size_t>(dim) * sizeof(float));
    } else if (pool == EmbedPool::kToken) {
      std::memcpy(o, x, static_cast<size_t>(dim) * sizeof(float));  // token 0 is the first D values
    } else if (s.size() == 4) {
      const int64_t hw = s[2] * s[3];
      for (int64_t c = 0; c < dim; ++c) {
        double sum = 0;
        for (int64_t k = 0; k < hw; ++k) sum += x[c * hw + k];
        o[c] = static_cast<float>(sum / static_cast<double>(hw));
      }
    } else {  // [N, T, D]: mean over T
      const int64_t t = s[1];
      for (int64_t d = 0; d < dim; ++d) {
        double sum = 0;
        for (int64_t k = 0; k < t; ++k) sum += x[k * dim + d];
        o[d] = static_cast<float>(sum / static_cast<double>(t));
      }
    }
    if (norm == L2Norm::kOn) {
      double sq = 0;
      for (int64_t d = 0; d < dim; ++d) sq += static_cast<double>(o[d]) * o[d];
      const double scale = 1.0 / std::max(std::sqrt(sq), 1e-12);
      for (int64_t d = 0; d < dim; ++d) o[d] = static_cast<float>(o[d] * scale);
    }
  }
}

std::string npy_f32_header(const std::vector<int64_t>& shape) {
  std::string py = "(";
  for (size_t i = 0; i < shape.size(); ++i) py += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) py += ",";
  py += ")";
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': " + py + ", }";
  if (!shape.empty()) dict.append(21 - std::to_string(shape[0]).size(), ' ');
  const size_t padlen = 64 - (10 + dict.size() + 1) % 64;
  const std::string header = dict + std::string(padlen, ' ') + "\n";
  std::string out = "\x93NUMPY";
  out.push_back(1);
  out.push_back(0);
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>((header.size() >> 8) & 0xff));
  return out + header;
}

namespace {

std::string beside_out(const std::string& out, const std::string& suffix) {
  const bool npy = out.size() > 4 && out.compare(out.size() - 4, 4, ".npy") == 0;
  return (npy ? out.substr(0, out.size() - 4) : out) + suffix;
}

}  // namespace

std::string embed_paths_file(const std::string& out) { return beside_out(out, ".paths.txt"); }
std::string embed_skipped_file(const std::string& out) { return beside_out(out, ".skipped.txt"); }

std::string escape_path_line(const std::string& path) {
  static const char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(path.size());
  for (const char ch : path) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += ch;
    }
  }
  return out;
}

const char* preset_key_name(TransformPreset preset) {
  switch (preset) {
    case TransformPreset::kNone:
      return "NONE";
    case TransformPreset::kImagenet:
      return "IMAGENET";
    case TransformPreset::kVitEval:
      return "VIT_EVAL";
  }
  return "?";
}

std::optional<TransformPreset> declared_preset(const ConfigNode& net_root) {
  if (!net_root.has("preset")) return std::nullopt;
  return parse_transform_preset(net_root.get_enum("preset", {"NONE", "IMAGENET", "VIT_EVAL"}, ""));
}

namespace {

// Rows of an N x C x H x W float32 .npy, read a batch at a time.
class NpyRowReader {
 public:
  explicit NpyRowReader(const std::string& path) : path_(path) {
    f_ = std::fopen(path.c_str(), "rb");
    if (!f_) fail<IoError>("cannot open '", path, "': ", std::strerror(errno));
    unsigned char pre[10];
    if (std::fread(pre, 1, 10, f_) != 10 || std::memcmp(pre, "\x93NUMPY", 6) != 0) {
      fail<IoError>(path, ": not a .npy file");
    }
    size_t len = pre[8] | (pre[9] << 8);
    size_t offset = 10;
    if (pre[6] >= 2) {
      unsigned char more[2];
      if (std::fread(more, 1, 2, f_) != 2) fail<IoError>(path, ": truncated .npy header");
      len |= static_cast<size_t>(more[0]) << 16 | static_cast<size_t>(more[1]) << 24;
      offset = 12;
    }
    std::string header(len, '\0');
    if (std::fread(&header[0], 1, len, f_) != len) fail<IoError>(path, ": truncated .npy header");
    const size_t shape_at = header.find("'shape':");
    if (header.find("'descr': '<f4'") == std::string::npos) {
      fail<IoError>(path, ": --input needs float32 ('<f4') data; convert with x.astype(numpy.float32)");
    }
    if (header.find("'fortran_order': False") == std::string::npos) {
      fail<IoError>(path, ": Fortran-order arrays are not supported; save numpy.ascontiguousarray(x)");
    }
    if (shape_at == std::string::npos) fail<IoError>(path, ": .npy header has no shape");
    const size_t open = header.find('(', shape_at), close = header.find(')', shape_at);
    if (open == std::string::npos || close == std::string::npos) fail<IoError>(path, ": malformed .npy shape");
    std::string dims = header.substr(open + 1, close - open - 1);
    for (char& c : dims) c = c == ',' ? ' ' : c;
    std::istringstream is(dims);
    int64_t d;
    while (is >> d) shape_.push_back(d);
    if (shape_.size() != 4) {
      fail<IoError>(path, ": --input needs an N x C x H x W array, got shape ", shape_str(shape_));
    }
    data_offset_ = offset + len;
    std::fseek(f_, 0, SEEK_END);
    const long size = std::ftell(f_);
    const int64_t want = static_cast<int64_t>(data_offset_) + shape_numel(shape_) * 4;
    if (size != want) fail<IoError>(path, ": holds ", size, " bytes, its shape ", shape_str(shape_), " needs ", want);
    std::fseek(f_, static_cast<long>(data_offset_), SEEK_SET);
  }
  ~NpyRowReader() {
    if (f_) std::fclose(f_);
  }
  const Shape& shape() const { return shape_; }
  void read(int64_t rows, float* out) {
    const size_t n = static_cast<size_t>(rows * shape_numel(Shape(shape_.begin() + 1, shape_.end())));
    if (std::fread(out, sizeof(float), n, f_) != n) fail<IoError>(path_, ": read failed");
  }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  Shape shape_;
  size_t data_offset_ = 0;
};

// The index of the last layer that writes blob `name` (in-place layers included).
int last_writer(Net& net, const std::string& name) {
  Blob* target = &net.blob(name);
  int last = -1;
  for (int i = 0; i < net.num_layers(); ++i) {
    for (Blob* t : net.tops(i)) {
      if (t == target) last = i;
    }
  }
  return last;
}

// The flag spelling of a preset, as --preset takes it.
const char* preset_flag_name(TransformPreset preset) {
  switch (preset) {
    case TransformPreset::kNone:
      return "none";
    case TransformPreset::kImagenet:
      return "imagenet";
    case TransformPreset::kVitEval:
      return "vit";
  }
  return "?";
}

// The transform images get: --preset, else the model's `preset:`, else
// IMAGENET. Both unset, or the two differing, is said in a note: either way
// the rows depend on a normalisation the user may not have meant.
TransformPreset choose_preset(const EmbedOptions& o, const ConfigNode& root,
                              const std::function<void(const std::string&)>& note) {
  const std::optional<TransformPreset> declared = declared_preset(root);
  const std::string where = declared ? root.find("preset")->loc().str() : "";
  if (o.preset) {
    if (declared && *declared != *o.preset) {
      note(std::string("warning: --preset ") + preset_flag_name(*o.preset) + " differs from the model's preset: " +
           preset_key_name(*declared) + " (" + where + "); using " + preset_flag_name(*o.preset) +
           ", which is right only if the weights were trained with it (leave --preset out to use the model's)");
    }
    return *o.preset;
  }
  if (declared) {
    note(std::string("image transform: preset ") + preset_key_name(*declared) + ", declared by the model (" + where +
         ")");
    return *declared;
  }
  note(std::string("image transform: preset IMAGENET (the model declares none and --preset is not given; "
                   "add `preset: IMAGENET | VIT_EVAL | NONE` to ") +
       o.model + " or pass --preset)");
  return TransformPreset::kImagenet;
}

}  // namespace

EmbedResult run_embed(const EmbedOptions& o) {
  if (o.images.empty() == o.input.empty()) fail<ConfigError>("give either --images DIR|LIST or --input FILE.npy");
  if (o.batch <= 0) fail<ConfigError>("--batch must be > 0, got ", o.batch);
  if (o.out.empty()) fail<ConfigError>("--out is required");
  const std::function<void(const std::string&)> note =
      o.on_note ? o.on_note : [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  const bool skip_bad = o.bad_images == BadImages::kSkip;

  // Inputs first: a wrong path fails before the (slow) model load.
  std::vector<ImageItem> items;
  std::unique_ptr<NpyRowReader> reader;
  if (!o.images.empty()) {
    // Every image under a folder (labels do not matter here), or a list file.
    std::error_code ec;
    ImageWalkNotes left_out;
    items = std::filesystem::is_directory(o.images, ec) ? walk_images(o.images, &left_out)
                                                        : read_image_list(o.images, "");
    if (items.empty()) fail<ConfigError>("--images: folder '", o.images, "' holds no image files");
    for (const std::string& line : left_out.lines()) note("note: --images: " + line);
  } else {
    reader = std::make_unique<NpyRowReader>(o.input);
  }

  const ConfigNode root = parse_config_file(o.model);
  NetOptions net_options;
  net_options.phase = Phase::kTest;
  net_options.device = o.device;
  net_options.storage_dtype = o.storage_dtype;
  net_options.channels_last = o.channels_last;
  net_options.blob_memory = BlobMemory::kByLifetime;  // forward only; the embedded blob is kept (below)
  net_options.base_dir = dirname_of(o.model);
  auto net = std::make_unique<Net>(root, net_options);
  const std::vector<std::string> inputs = net->input_names();
  if (inputs.size() != 1) {
    fail<ConfigError>(o.model, ": embed needs a deploy net with exactly one Input blob, found ", inputs.size());
  }
  Blob& input = net->blob(inputs[0]);
  if (input.shape().size() != 4) {
    fail<ConfigError>(o.model, ": the Input blob '", inputs[0], "' is ", shape_str(input.shape()),
                      "; embed feeds images as [N, C, H, W]");
  }
  const int64_t channels = input.shape()[1], height = input.shape()[2], width = input.shape()[3];
  if (!net->has_blob(o.layer)) {
    // The nearest name first; a long list is cut (a ViT has hundreds of blobs).
    const std::vector<std::string>& all = net->blob_names();
    const std::string nearest = nearest_key(o.layer, all);
    std::string names;
    const size_t shown = std::min<size_t>(all.size(), 24);
    for (size_t i = 0; i < shown; ++i) names += (i ? ", " : "") + all[i];
    if (shown < all.size()) names += ", ... (" + std::to_string(all.size()) + " in all)";
    fail<ConfigError>("--layer: net '", net->name(), "' has no blob '", o.layer, "'",
                      nearest.empty() ? std::string() : "; did you mean '" + nearest + "'?", " Its blobs are: ",
                      names);
  }
  net->keep_blobs({o.layer});  // read after forward
  const int stop_layer = last_writer(*net, o.layer);
  const int64_t dim = embed_dim(net->blob(o.layer).shape(), o.pool, o.layer);

  PretrainedOptions pretrained;
  pretrained.format = o.format;
  pretrained.reinit = o.reinit;
  if (o.weights.empty() && !net->params().empty()) {
    fail<ConfigError>("--weights is required: net '", net->name(), "' has ", net->params().size(),
                      " parameters (e.g. '", net->params()[0].name, "')");
  }
  if (!o.weights.empty()) {
    const LoadReport report = load_pretrained(*net, o.weights, pretrained);
    if (o.on_loaded) o.on_loaded(report);
  }

  EmbedResult result;
  std::unique_ptr<ImageLoader> loader;
  int64_t total = 0;
  if (reader) {
    const Shape& s = reader->shape();
    if (s[1] != channels || s[2] != height || s[3] != width) {
      fail<ShapeError>(o.input, ": arrays are ", shape_str(s), ", the net's input '", inputs[0], "' takes [N, ",
                       channels, ", ", height, ", ", width, "]");
    }
    total = s[0];
  } else {
    if (channels != 3) {
      fail<ConfigError>(o.model, ": the Input blob '", inputs[0], "' has ", channels,
                        " channels; images are fed as RGB (3 channels)");
    }
    const TransformPreset preset = choose_preset(o, root, note);
    result.preset = preset_key_name(preset);
    ImageTransform t = preset_transform(preset);
    if (preset == TransformPreset::kNone) {
      t.crop_height = static_cast<int>(height);
      t.crop_width = static_cast<int>(width);
    }
    if (o.resize >= 0) t.resize = o.resize;
    if (o.crop > 0) t.crop_height = t.crop_width = o.crop;
    if (t.crop_height != height || t.crop_width != width) {
      fail<ConfigError>("the transform crops ", t.crop_height, "x", t.crop_width, " but the net's input '", inputs[0],
                        "' is ", height, "x", width, "; pass --crop ", height, " (and a matching --resize)");
    }
    ImageLoaderOptions lo;
    lo.batch_size = o.batch;
    lo.threads = o.decode_threads;
    lo.prefetch = 2;
    lo.epochs = EpochMode::kOnce;
    lo.bad_images = o.bad_images;
    // The loader's line names its option (skip_bad_images, a layer key);
    // this one speaks of the image alone.
    lo.on_skip = [note](const std::string& line) {
      const std::string tag = "--images: ";
      const size_t at = line.find(tag);
      note(at == std::string::npos ? line : "skipping unreadable image " + line.substr(at + tag.size()));
    };
    lo.out_height = static_cast<int>(height);
    lo.out_width = static_cast<int>(width);
    total = static_cast<int64_t>(items.size());
    loader = std::make_unique<ImageLoader>(items, t, lo, "--images");
  }

  result.dim = dim;
  result.paths_file = embed_paths_file(o.out);
  if (skip_bad) result.skipped_file = embed_skipped_file(o.out);
  std::vector<std::string> paths;
  paths.reserve(static_cast<size_t>(total));
  std::vector<float> rows(static_cast<size_t>(o.batch * dim));
  const int64_t sample = channels * height * width;

  // An input that cannot be read fails the run with its own message, not as
  // a failure to write --out (which write_file_atomically would prefix).
  std::string input_error;
  auto input_failure = [&](const std::string& message) {
    input_error = message;
    throw IoError(message);
  };
  // The next batch of images; false at the end. Without kSkip an unreadable
  // image ends the run, with its path and the way to go on without it.
  auto next_images = [&](ImageBatch& batch) {
    try {
      return loader->next(batch);
    } catch (const IoError& e) {
      if (skip_bad) input_failure(e.what());
      input_failure(std::string(e.what()) +
                    "\n  (--skip-bad-images leaves unreadable images out, counts them and lists them in " +
                    embed_skipped_file(o.out) + ")");
      return false;
    }
  };

  auto write_rows = [&] {
    write_file_atomically(o.out, [&](std::FILE* f) {
      // The header says `total` rows; with skipped images it is rewritten at
      // the end (npy_f32_header pads to the same length for any row count).
      const std::string header = npy_f32_header({total, dim});
      fwrite_checked(f, header.data(), header.size());
      if (o.progress) o.progress(0, total);
      int64_t done = 0;      // rows written
      int64_t reported = 0;  // inputs read, as last given to o.progress
      ImageBatch batch;
      // One batch in flight: the host stages the next batch and writes the
      // rows of the last while the device runs this one (transfer/batch_pipeline.h).
      BatchPipeline pipe(o.device);
      std::deque<std::pair<Shape, int64_t>> flying;  // each batch's output shape and rows, oldest first
      auto write_oldest = [&] {
        const BatchPipeline::Finished out = pipe.finish_oldest();
        const auto [shape, n] = flying.front();
        flying.pop_front();
        pool_rows(shape, out.data, n, o.pool, o.l2, rows.data());
        fwrite_checked(f, rows.data(), static_cast<size_t>(n * dim) * sizeof(float));
        done += n;
      };
      while (reported < total) {
        if (pipe.in_flight() == BatchPipeline::kSlots) write_oldest();  // frees the slot this batch fills
        int64_t n = 0;
        float* staged = nullptr;
        if (loader) {
          if (!next_images(batch)) break;
          n = batch.rows;
          if (n == 0) continue;
          staged = pipe.input(n * sample);
          std::memcpy(staged, batch.data.data(), static_cast<size_t>(n * sample) * sizeof(float));
          for (int64_t r = 0; r < n; ++r) {
            paths.push_back(items[static_cast<size_t>(batch.items[static_cast<size_t>(r)])].path);
          }
        } else {
          n = std::min(o.batch, total - reported);
          staged = pipe.input(n * sample);
          try {
            reader->read(n, staged);
          } catch (const IoError& e) {
            input_failure(e.what());
          }
          for (int64_t r = 0; r < n; ++r) paths.push_back(o.input + "[" + std::to_string(reported + r) + "]");
        }
        if (input.shape()[0] != n) {  // a new batch size: every blob's shape, and their plan, follow
          while (pipe.in_flight() > 0) write_oldest();  // the batches in flight read the old blobs
          input.resize({n, channels, height, width});
          net->reshape();
        }
        pipe.send_input(input.data);
        net->forward(0, stop_layer);
        const Blob& out = net->blob(o.layer);
        if (out.shape().empty() || out.shape()[0] != n || embed_dim(out.shape(), o.pool, o.layer) != dim) {
          fail<ShapeError>("blob '", o.layer, "' is ", shape_str(out.shape()), " for a batch of ", n,
                           "; embed needs the batch on axis 0 and the same row size for every batch");
        }
        pipe.receive_output(out.data);
        flying.emplace_back(out.shape(), n);
        // Skipped images count as done: the bar measures the inputs read.
        reported = loader ? loader->position() : reported + n;
        if (o.progress) o.progress(reported, total);
      }
      while (pipe.in_flight() > 0) write_oldest();
      // Images skipped after the last row still end the bar.
      if (o.progress && reported < total && loader) o.progress(total, total);
      if (loader) {
        for (int64_t item : loader->skipped()) result.skipped.push_back(items[static_cast<size_t>(item)].path);
      }
      const int64_t skipped = static_cast<int64_t>(result.skipped.size());
      if (done + skipped != total) {
        fail<Error>("read ", done, " inputs", skipped ? " and skipped " + std::to_string(skipped) : "", ", expected ",
                    total);
      }
      if (done == 0 && total > 0) input_failure("--images: all " + std::to_string(total) + " images are unreadable");
      if (skipped > 0) {
        const std::string fixed = npy_f32_header({done, dim});
        STRATA_CHECK(fixed.size() == header.size(), "npy header length changed: ", header.size(), " -> ",
                     fixed.size());
        if (std::fseek(f, 0, SEEK_SET) != 0) fail<IoError>(o.out, ": seek failed: ", std::strerror(errno));
        fwrite_checked(f, fixed.data(), fixed.size());
      }
      result.rows = done;
      // The lists go in place first: a reader who finds the .npy finds its paths.
      auto write_lines = [](const std::string& path, const std::vector<std::string>& lines) {
        write_file_atomically(path, [&](std::FILE* pf) {
          for (const std::string& p : lines) {
            const std::string line = escape_path_line(p);
            fwrite_checked(pf, line.data(), line.size());
            fwrite_checked(pf, "\n", 1);
          }
        });
      };
      write_lines(result.paths_file, paths);
      if (skip_bad) write_lines(result.skipped_file, result.skipped);
    });
  };
  try {
    write_rows();
  } catch (const IoError&) {
    if (!input_error.empty()) throw IoError(input_error);
    throw;
  }
  // A list of skipped images left by an earlier run with --skip-bad-images
  // described the .npy just replaced; without the flag nothing was skipped.
  if (!skip_bad) {
    std::error_code ec;
    std::filesystem::remove(embed_skipped_file(o.out), ec);
  }
  return result;
}

}  // namespace strata::transfer
