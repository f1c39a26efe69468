// What every in-memory data layer shares: the options in its *_data_param
// (batch_size, shuffle, seed, shard), the transform_param, and DataSource,
// which owns the samples and decides which ones make up each batch.
//
// Sampling follows Caffe: batches are always full; when a rank has read all
// of its samples the epoch ends, the order is reshuffled (if shuffling) and
// reading continues, so one batch may straddle two epochs. With shard: AUTO
// rank r of w reads exactly the samples i with i % w == r, so the ranks
// together cover the data set once per epoch without overlap.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/layer.h"  // Phase
#include "framework/rng.h"
#include "framework/tensor.h"

namespace strata {

enum class ShuffleMode { kOff, kOn };
enum class ShardMode { kAuto, kNone };

struct DataOptions {
  int64_t batch_size = 0;
  ShuffleMode shuffle = ShuffleMode::kOff;
  std::optional<uint64_t> seed;  // absent: continue from the layer's own rng_
  ShardMode shard = ShardMode::kAuto;
};

// The keys read by read_data_options, for the layers' schemas.
const std::vector<std::string>& data_option_keys();
// Reads batch_size (required, > 0), shuffle (default: on in TRAIN, off in
// TEST), seed and shard from a layer's *_data_param block. `where` names
// the layer in error messages.
DataOptions read_data_options(const ConfigNode& param, Phase phase, const std::string& where);

// Caffe's transform_param subset: out = (x - mean[channel]) * scale.
struct DataTransform {
  float scale = 1.0f;
  std::vector<float> mean_value;  // empty, one value for all channels, or one per channel

  bool is_identity() const;
};

const std::vector<std::string>& transform_keys();
DataTransform read_transform(const ConfigNode& transform_param);

// A whole data set in memory.
struct InMemoryData {
  Tensor samples;                // [N, ...] of f32 or u8; axis 1 (if any) is the channel axis
  std::vector<int32_t> labels;   // N entries, or empty when the data set has no labels
};

class DataSource {
 public:
  // `rng` is copied: the source keeps its own generator (seeded by
  // options.seed when given), so its state is part of save_state().
  // `where` prefixes error messages ("layer 'mnist' (MnistData) at f:3:1").
  DataSource(InMemoryData data, const DataOptions& options, const DataTransform& transform,
             const Rng& rng, int rank, int world_size, std::string where);

  int64_t batch_size() const { return options_.batch_size; }
  int64_t num_samples() const { return data_.samples.dim(0); }
  bool has_labels() const { return !data_.labels.empty(); }
  // [batch_size, sample dims...]
  Shape batch_shape() const;
  // The sample indices this rank reads, ascending.
  const std::vector<int64_t>& shard() const { return shard_; }
  // Completed passes over this rank's shard, and the position in the current one.
  int64_t epoch() const { return epoch_; }
  int64_t cursor() const { return cursor_; }

  // The sample indices of the next batch (batch_size of them); advances.
  const std::vector<int64_t>& next_indices();
  // Fills the next batch: data holds batch_shape() floats, labels (may be
  // null) batch_size floats. Advances like next_indices().
  void next_batch(float* data, float* labels);

  // Everything a bit-exact resume needs: order, cursor, epoch and RNG.
  std::string save_state() const;
  // Throws Error when the state is corrupt or was saved for another data
  // set size or shard.
  void load_state(const std::string& state);

 private:
  void reshuffle();
  void copy_sample(int64_t index, float* out) const;

  InMemoryData data_;
  DataOptions options_;
  DataTransform transform_;
  Rng rng_;
  int rank_ = 0;
  int world_size_ = 1;
  std::string where_;

  int64_t sample_size_ = 0;   // values per sample
  int64_t channels_ = 1;      // axis 1 of the samples (1 for N-vectors)
  int64_t channel_size_ = 0;  // values per channel of one sample
  std::vector<int64_t> shard_;
  std::vector<int64_t> order_;  // shard_ in reading order for the current epoch
  int64_t cursor_ = 0;
  int64_t epoch_ = 0;
  std::vector<int64_t> batch_;  // reused by next_indices
};

}  // namespace strata
