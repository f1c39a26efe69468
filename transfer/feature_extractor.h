// Feature extraction (`strata embed`): runs images (or preprocessed arrays)
// through a deploy net with pretrained weights and writes one row per input,
// taken from a named blob, to a .npy file, in bounded memory.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "framework/io/checkpoint.h"
#include "framework/tensor.h"
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

// The .npy header (format 1.0, as numpy.save writes it) of a C-order
// float32 array of this shape: write it, then the values.
std::string npy_f32_header(const std::vector<int64_t>& shape);

struct EmbedOptions {
  std::string model;        // deploy prototxt (its TEST phase; one Input blob [n, C, H, W])
  std::string weights;      // safetensors, any format load_pretrained reads
  WeightsFormat format = WeightsFormat::kAuto;
  std::string layer;        // the blob to take rows from
  std::string images;       // a folder or a list file ...
  std::string input;        // ... or an N x C x H x W float32 .npy (already preprocessed)
  std::string out;          // .npy to write; paths go to <out without .npy>.paths.txt
  int64_t batch = 8;
  EmbedPool pool = EmbedPool::kNone;
  L2Norm l2 = L2Norm::kOff;
  TransformPreset preset = TransformPreset::kImagenet;
  int resize = -1;          // -1: the preset's
  int crop = -1;            // -1: the preset's (NONE: the net's input size)
  int decode_threads = 0;   // 0: one per core
  Device device;            // where the net runs; inputs and rows are staged on the host
  // After each batch: inputs done and in all. Also once with done = 0.
  std::function<void(int64_t done, int64_t total)> progress;
  // Called once the net and weights are loaded (e.g. to print the report).
  std::function<void(const LoadReport&)> on_loaded;
};

struct EmbedResult {
  int64_t rows = 0;
  int64_t dim = 0;
  std::string paths_file;
};

// Everything `strata embed` does. The .npy and the paths file appear only
// when every row was written (temp files renamed into place); on an error
// neither is left behind and an existing file of that name is untouched.
EmbedResult run_embed(const EmbedOptions& options);

// "<out without .npy>.paths.txt"
std::string embed_paths_file(const std::string& out);

}  // namespace strata::transfer
