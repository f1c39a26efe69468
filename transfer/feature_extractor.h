// Feature extraction (`strata embed`): runs images (or preprocessed arrays)
// through a deploy net with pretrained weights and writes one row per input,
// taken from a named blob, to a .npy file, in bounded memory.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "framework/io/checkpoint.h"
#include "framework/tensor.h"
#include "framework/config/config.h"
#include "framework/data/image_loader.h"
#include "framework/data/image_transform.h"
#include "transfer/pretrained.h"

namespace strata::transfer {

// How a blob of one batch becomes one row per input:
//   kNone:  flattened ([N, ...] -> N x prod(...))
//   kAvg:   mean over the spatial dims of [N, C, H, W] (-> C), or over the
//           tokens of [N, T, D] (-> D); [N, D] is kept
//   kToken: token 0 of [N, T, D] (the class token) (-> D)
enum class EmbedPool { kNone, kAvg, kToken };
// "none", "avg", "token"; ConfigError naming `flag` otherwise.
EmbedPool parse_embed_pool(const std::string& text, const std::string& flag);
enum class L2Norm { kOff, kOn };

// Row length for a blob of this shape; ShapeError saying which shapes the
// pooling takes otherwise. `blob` names the blob in messages.
int64_t embed_dim(const Shape& shape, EmbedPool pool, const std::string& blob);
// The first `rows` rows of `blob` pooled (and L2-normalised, eps 1e-12 as
// torch.nn.functional.normalize) into out (rows x embed_dim floats).
void pool_rows(const Tensor& blob, int64_t rows, EmbedPool pool, L2Norm norm, float* out);
// The same from a host copy of a blob of shape `shape` (f32 values at `values`).
void pool_rows(const Shape& shape, const float* values, int64_t rows, EmbedPool pool, L2Norm norm, float* out);

// The .npy header (format 1.0, as numpy.save writes it) of a C-order
// float32 array of this shape: write it, then the values.
std::string npy_f32_header(const std::vector<int64_t>& shape);

struct EmbedOptions {
  std::string model;        // deploy prototxt (its TEST phase; one Input blob [n, C, H, W])
  std::string weights;      // safetensors, any format load_pretrained reads
  WeightsFormat format = WeightsFormat::kAuto;
  // Layers left as initialised (--reinit), as in `strata train`: e.g. the
  // head of a fine-tuned snapshot whose class count differs from the deploy net's.
  std::set<std::string> reinit;
  std::string layer;        // the blob to take rows from
  std::string images;       // a folder or a list file ...
  std::string input;        // ... or an N x C x H x W float32 .npy (already preprocessed)
  std::string out;          // .npy to write; paths go to <out without .npy>.paths.txt
  // kSkip: an image that cannot be read or decoded is left out, counted and
  // listed (EmbedResult::skipped, <out without .npy>.skipped.txt); kError:
  // the first one stops the run with its path.
  BadImages bad_images = BadImages::kError;
  int64_t batch = 8;
  EmbedPool pool = EmbedPool::kNone;
  L2Norm l2 = L2Norm::kOff;
  // The image transform. Unset: the one the model declares (net-level
  // `preset:`), else IMAGENET with a note saying so. Set and different from
  // the model's: used, with a warning naming both.
  std::optional<TransformPreset> preset;
  int resize = -1;          // -1: the preset's
  int crop = -1;            // -1: the preset's (NONE: the net's input size)
  int decode_threads = 0;   // 0: one per core
  Device device;            // where the net runs; inputs and rows are staged on the host
  // What the net stores its activations in (NetOptions::storage_dtype): f32,
  // or bf16/f16 (`--precision BF16/FP16`); the extracted blob stays f32.
  DType storage_dtype = DType::kF32;
  // Image blobs between convolutions stored NHWC (NetOptions::channels_last,
  // `--channels-last`); the extracted blob stays NCHW.
  bool channels_last = false;
  // After each batch: inputs done and in all. Also once with done = 0.
  std::function<void(int64_t done, int64_t total)> progress;
  // Called once the net and weights are loaded (e.g. to print the report).
  std::function<void(const LoadReport&)> on_loaded;
  // Lines for the user: which preset is used and why, a preset that differs
  // from the model's, each skipped image. May be called from the image
  // decoding thread. Unset: written to stderr.
  std::function<void(const std::string&)> on_note;
};

struct EmbedResult {
  int64_t rows = 0;
  int64_t dim = 0;
  std::string paths_file;
  std::string preset;                 // the transform used ("IMAGENET", ...); empty with --input
  std::vector<std::string> skipped;   // inputs left out (kSkip), in reading order
  std::string skipped_file;           // kSkip: where `skipped` was written (one path per line)
};

// Everything `strata embed` does. The .npy and the paths file appear only
// when every row was written (temp files renamed into place); on an error
// neither is left behind and an existing file of that name is untouched.
// With kSkip the .npy holds one row per readable input (its header says how
// many) and the paths file names them, row i on line i.
EmbedResult run_embed(const EmbedOptions& options);

// "<out without .npy>.paths.txt"
std::string embed_paths_file(const std::string& out);
// "<out without .npy>.skipped.txt"
std::string embed_skipped_file(const std::string& out);
// A path as one line of the paths and skipped files, so that a file name
// holding any byte stays one line: backslash is written "\\", newline "\n",
// carriage return "\r", tab "\t", every other control byte (below 0x20, and
// 0x7f) "\xHH"; all other bytes (UTF-8 included) as they are. Python reads a
// line back with codecs.escape_decode(line_bytes)[0].
std::string escape_path_line(const std::string& path);

// The image transform a net file declares with its top-level
// `preset: NONE | IMAGENET | VIT_EVAL` key (for `strata embed`); nullopt
// when it declares none. ConfigError (with file:line) for another value.
std::optional<TransformPreset> declared_preset(const ConfigNode& net_root);
// "NONE", "IMAGENET", "VIT_EVAL": the key's spelling.
const char* preset_key_name(TransformPreset preset);

}  // namespace strata::transfer
