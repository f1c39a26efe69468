// strata embed: one feature row per image (or preprocessed array) from a
// named blob of a deploy net, written to a .npy with the input paths beside it.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#ifdef STRATA_WITH_CUDA
#include "framework/cuda/device_api.h"
#endif
#include "framework/error.h"
#include "framework/io/file_util.h"
#include "framework/solver/precision.h"
#include "tools/strata/args.h"
#include "tools/strata/commands.h"
#include "tools/strata/flag_lists.h"
#include "transfer/feature_extractor.h"

namespace strata::cli {

namespace {

// done/total, images/s and ETA on stderr: redrawn in place at most ~10 times
// a second on a terminal; elsewhere (logs, pipes) only the final line.
class ProgressBar {
 public:
  ProgressBar() : tty_(::isatty(2) != 0), start_(Clock::now()), last_draw_(start_) {}

  // A line of its own: on a terminal the bar's line is cleared first and
  // redrawn at the next update.
  void note(const std::string& line) {
    std::lock_guard<std::mutex> lock(mu_);
    std::fprintf(stderr, "%s%s\n", tty_ ? "\r\033[K" : "", line.c_str());
    std::fflush(stderr);
    last_draw_ = Clock::time_point();
  }

  void update(int64_t done, int64_t total) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = Clock::now();
    // The rate counts from the first batch on: building the net and loading
    // the weights come before update(0, total) and are not image throughput.
    if (done == 0 && !started_) {
      started_ = true;
      start_ = last_draw_ = now;
    }
    const bool final = done >= total;
    if (!final && (!tty_ || now - last_draw_ < std::chrono::milliseconds(100))) return;
    last_draw_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double rate = secs > 0 ? done / secs : 0.0;
    std::string eta = "--:--";
    if (rate > 0 && !final) {
      const int64_t left = static_cast<int64_t>((total - done) / rate + 0.5);
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%lld:%02lld", static_cast<long long>(left / 60),
                    static_cast<long long>(left % 60));
      eta = buf;
    }
    const int width = 30;
    const int filled = total > 0 ? static_cast<int>(width * done / total) : width;
    std::fprintf(stderr, "%s[%s%s] %lld/%lld images  %.1f images/s  %s %s%s", tty_ ? "\r" : "",
                 std::string(static_cast<size_t>(filled), '#').c_str(),
                 std::string(static_cast<size_t>(width - filled), '.').c_str(), static_cast<long long>(done),
                 static_cast<long long>(total), rate, final ? "in" : "ETA",
                 final ? format_secs(secs).c_str() : eta.c_str(), final || !tty_ ? "\n" : "");
    std::fflush(stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;
  static std::string format_secs(double s) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f s", s);
    return buf;
  }
  std::mutex mu_;  // note() may come from the decoding thread
  bool tty_;
  bool started_ = false;
  Clock::time_point start_, last_draw_;
};

int int_flag(const Args& args, const std::string& name, int def, int min) {
  const int v = args.get_int(name, def);
  if (v < min) fail<ConfigError>("--", name, " must be >= ", min, ", got ", v);
  return v;
}

}  // namespace

int embed_main(int argc, char** argv) {
  Args args("embed",
            {{"model", FlagKind::kValue, "deploy prototxt (one Input blob [N, C, H, W])", ""},
             {"weights", FlagKind::kValue,
              ".safetensors weights (strata, torchvision or timm names); needed when the net has parameters", ""},
             {"weights-format", FlagKind::kValue,
              "names in the --weights file: auto, strata, torchvision-vgg, torchvision-vit, timm-vit, caffe", "auto"},
             {"reinit", FlagKind::kRepeated,
              "layers (comma-separated) left as initialised, e.g. a fine-tuned snapshot's head", ""},
             {"layer", FlagKind::kValue, "blob whose values become the rows", ""},
             {"images", FlagKind::kValue, "folder of images (or of class subfolders), or a list file", ""},
             {"input", FlagKind::kValue, "preprocessed N x C x H x W float32 .npy instead of --images", ""},
             {"out", FlagKind::kValue, ".npy to write (paths go to <out>.paths.txt)", ""},
             {"overwrite", FlagKind::kSwitch,
              "replace an existing --out that is not an earlier embed output (never an input)", ""},
             {"skip-bad-images", FlagKind::kSwitch,
              "leave out images that cannot be read or decoded; count them and list them in <out>.skipped.txt",
              ""},
             {"batch", FlagKind::kValue, "inputs per forward pass", "8"},
             {"pool", FlagKind::kValue, "none (flatten), avg (spatial or token mean), token (token 0)", "none"},
             {"l2norm", FlagKind::kSwitch, "L2-normalise every row", ""},
             {"preset", FlagKind::kValue, "image transform: imagenet, vit or none",
              "the model's `preset:`, else imagenet"},
             {"resize", FlagKind::kValue, "shorter side after resizing (overrides the preset; 0 = none)", ""},
             {"crop", FlagKind::kValue, "centre crop size (overrides the preset)", ""},
             {"decode-threads", FlagKind::kValue, "image decoding threads (0 = one per core)", "0"},
             {"device", FlagKind::kValue, "cpu, cuda or cuda:N (builds with CUDA)", "cpu"},
             {"precision", FlagKind::kValue,
              "FP32, TF32 (GPU), BF16 or FP16: BF16/FP16 store activations in 16 bits (the rows stay f32)", "FP32"},
             {"channels-last", FlagKind::kSwitch,
              "store the image blobs between convolutions NHWC (the solver's channels_last; the rows are the same)", ""},
             {"threads", FlagKind::kValue, "CPU threads for GEMM and layer loops (0 = all cores)", "all cores"}});
  if (parse_command_flags(args, argc, argv) == FlagsParsed::kHelpShown) return 0;
  transfer::EmbedOptions o;
  o.model = args.require("model");
  o.weights = args.get("weights", "");  // required when the net has parameters (run_embed says so)
  o.format = transfer::parse_weights_format(args.get("weights-format", "auto"), "--weights-format");
  o.layer = args.require("layer");
  o.images = args.get("images");
  o.input = args.get("input");
  if (o.images.empty() == o.input.empty()) fail<ConfigError>("give either --images DIR|LIST or --input FILE.npy");
  if (args.has("input") && (args.has("preset") || args.has("resize") || args.has("crop"))) {
    fail<ConfigError>("--preset, --resize and --crop apply to --images; --input arrays are used as they are");
  }
  o.out = args.require("out");
  {
    // Before any work: never an input, and an existing file only when it is an
    // earlier embed output (an .npy with its paths file beside it) or --overwrite.
    const std::vector<NamedInput> inputs = {
        {"--model", o.model}, {"--weights", o.weights}, {"--input", o.input}, {"--images", o.images}};
    const Overwrite overwrite = args.has("overwrite") ? Overwrite::kYes : Overwrite::kNo;
    const auto earlier_embed = [](const std::string& path) {
      return file_exists(transfer::embed_paths_file(path)) && path.size() > 4 &&
             path.compare(path.size() - 4, 4, ".npy") == 0;
    };
    check_output_path("--out", o.out, inputs, overwrite, earlier_embed);
    const std::string paths = transfer::embed_paths_file(o.out);
    check_output_path("--out (its paths file)", paths, inputs, overwrite,
                      [&](const std::string&) { return earlier_embed(o.out); });
  }
  o.batch = int_flag(args, "batch", 8, 1);
  o.pool = transfer::parse_embed_pool(args.get("pool", "none"), "--pool");
  o.l2 = args.has("l2norm") ? transfer::L2Norm::kOn : transfer::L2Norm::kOff;
  if (args.has("preset")) {
    const std::string preset = args.get("preset");
    if (preset != "imagenet" && preset != "vit" && preset != "none") {
      fail<ConfigError>("--preset: unknown preset '", preset, "'; use imagenet, vit or none");
    }
    o.preset = parse_transform_preset(preset);
  }
  if (args.has("skip-bad-images") && args.has("input")) {
    fail<ConfigError>("--skip-bad-images applies to --images; --input arrays have no images to skip");
  }
  o.bad_images = args.has("skip-bad-images") ? BadImages::kSkip : BadImages::kError;
  for (const std::string& layer : split_list(args.get_all("reinit"))) o.reinit.insert(layer);
  if (args.has("resize")) o.resize = int_flag(args, "resize", 0, 0);
  if (args.has("crop")) o.crop = int_flag(args, "crop", 0, 1);
  o.decode_threads = int_flag(args, "decode-threads", 0, 0);
  o.device = device_flag(args);
  const Precision precision = parse_precision(args.get("precision", "FP32"), "--precision");
  apply_precision(precision, o.device, "--precision");
  o.storage_dtype = storage_dtype_of(precision);
  o.channels_last = args.has("channels-last");
  o.on_loaded = [](const LoadReport& report) { std::fprintf(stderr, "%s\n", report.str().c_str()); };
  ProgressBar bar;
  o.progress = [&bar](int64_t done, int64_t total) { bar.update(done, total); };
  o.on_note = [&bar](const std::string& line) { bar.note("strata embed: " + line); };
  const transfer::EmbedResult r = transfer::run_embed(o);
  if (!r.skipped.empty()) {
    // The list, at the end where it is seen (a long one is in the file).
    const size_t shown = std::min<size_t>(r.skipped.size(), 20);
    std::fprintf(stderr, "strata embed: skipped %zu unreadable image%s (listed in %s):\n", r.skipped.size(),
                 r.skipped.size() == 1 ? "" : "s", r.skipped_file.c_str());
    for (size_t i = 0; i < shown; ++i) std::fprintf(stderr, "  %s\n", r.skipped[i].c_str());
    if (shown < r.skipped.size()) std::fprintf(stderr, "  ... and %zu more\n", r.skipped.size() - shown);
  }
  std::printf("wrote %lld x %lld float32 rows to %s (input paths in %s", static_cast<long long>(r.rows),
              static_cast<long long>(r.dim), o.out.c_str(), r.paths_file.c_str());
  if (!r.skipped_file.empty()) {
    std::printf("; %zu skipped, listed in %s", r.skipped.size(), r.skipped_file.c_str());
  }
  std::printf(")\n");
#ifdef STRATA_WITH_CUDA
  if (!o.device.is_cpu()) std::printf("%s\n", cuda::memory_stats(o.device.index).peak_line().c_str());
#endif
  return 0;
}

}  // namespace strata::cli
