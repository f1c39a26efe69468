#include "framework/data/data_source.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <utility>

#include "framework/error.h"
#include "framework/io/file_util.h"
#include "framework/cpu/threads.h"

namespace strata {

const std::vector<std::string>& data_option_keys() {
  static const std::vector<std::string> keys = {"batch_size", "shuffle", "seed", "shard"};
  return keys;
}

DataOptions read_data_options(const ConfigNode& param, Phase phase, const std::string& where) {
  DataOptions o;
  o.batch_size = param.get_int("batch_size");
  if (o.batch_size <= 0) {
    fail<ConfigError>(where, ": batch_size must be > 0, got ", o.batch_size, " at ",
                      param.find("batch_size")->loc().str());
  }
  o.shuffle = param.get_bool("shuffle", phase == Phase::kTrain) ? ShuffleMode::kOn : ShuffleMode::kOff;
  if (param.has("seed")) o.seed = static_cast<uint64_t>(param.get_int("seed"));
  o.shard = param.get_enum("shard", {"AUTO", "NONE"}, "AUTO") == "AUTO" ? ShardMode::kAuto
                                                                        : ShardMode::kNone;
  return o;
}

const std::vector<std::string>& transform_keys() {
  static const std::vector<std::string> keys = {"scale", "mean_value"};
  return keys;
}

DataTransform read_transform(const ConfigNode& transform_param) {
  DataTransform t;
  t.scale = static_cast<float>(transform_param.get_double("scale", 1.0));
  for (double m : transform_param.get_doubles("mean_value")) t.mean_value.push_back(static_cast<float>(m));
  return t;
}

bool DataTransform::is_identity() const {
  return scale == 1.0f &&
         std::all_of(mean_value.begin(), mean_value.end(), [](float m) { return m == 0.0f; });
}

// ---------------------------------------------------------------------------

DataSource::DataSource(InMemoryData data, const DataOptions& options, const DataTransform& transform,
                       const Rng& rng, int rank, int world_size, std::string where)
    : data_(std::move(data)),
      options_(options),
      transform_(transform),
      rng_(rng),
      rank_(rank),
      world_size_(world_size),
      where_(std::move(where)) {
  const Tensor& s = data_.samples;
  STRATA_CHECK(s.ndim() >= 1, "samples need a batch axis");
  STRATA_CHECK(s.dtype() == DType::kF32 || s.dtype() == DType::kU8, "samples must be f32 or u8");
  STRATA_CHECK(options_.batch_size > 0, "batch_size must be positive");
  STRATA_CHECK(world_size_ >= 1 && rank_ >= 0 && rank_ < world_size_, "rank ", rank_,
               " outside world of ", world_size_);
  const int64_t n = s.dim(0);
  if (n == 0) fail<ConfigError>(where_, ": the data set has no samples");
  if (!data_.labels.empty() && static_cast<int64_t>(data_.labels.size()) != n) {
    fail<ConfigError>(where_, ": ", n, " samples but ", data_.labels.size(), " labels");
  }
  sample_size_ = s.count(1);
  channels_ = s.ndim() >= 2 ? s.dim(1) : 1;
  channel_size_ = s.ndim() >= 2 ? s.count(2) : 1;

  const size_t means = transform_.mean_value.size();
  if (means > 1 && static_cast<int64_t>(means) != channels_) {
    fail<ConfigError>(where_, ": transform_param has ", means, " mean_value entries but the data has ",
                      channels_, " channels (shape ", shape_str(s.shape()),
                      "); give one mean_value for all channels or one per channel");
  }
  if (options_.seed) rng_.seed(*options_.seed);

  const int stride = options_.shard == ShardMode::kAuto ? world_size_ : 1;
  const int first = options_.shard == ShardMode::kAuto ? rank_ : 0;
  for (int64_t i = first; i < n; i += stride) shard_.push_back(i);
  if (shard_.empty()) {
    fail<ConfigError>(where_, ": the data set has ", n, " samples, too few to give rank ", rank_,
                      " of ", world_size_, " any; use more data or shard: NONE");
  }
  order_ = shard_;
  if (options_.shuffle == ShuffleMode::kOn) reshuffle();
}

Shape DataSource::batch_shape() const {
  Shape shape = data_.samples.shape();
  shape[0] = options_.batch_size;
  return shape;
}

void DataSource::reshuffle() {
  // Fisher-Yates with our own uniform_int, so the order is the same on every platform.
  for (size_t i = order_.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng_.uniform_int(i));
    std::swap(order_[i - 1], order_[j]);
  }
}

const std::vector<int64_t>& DataSource::next_indices() {
  // Sized at the first batch, not at construction: the Net checks its memory
  // plan (batch_size included) after setup and before the first batch.
  batch_.resize(static_cast<size_t>(options_.batch_size));
  const int64_t n = static_cast<int64_t>(order_.size());
  for (auto& index : batch_) {
    index = order_[static_cast<size_t>(cursor_)];
    // Wrap as soon as the epoch is used up, so cursor_ < n always holds and
    // epoch_ counts completed passes.
    if (++cursor_ == n) {
      cursor_ = 0;
      ++epoch_;
      if (options_.shuffle == ShuffleMode::kOn) reshuffle();
    }
  }
  return batch_;
}

void DataSource::copy_sample(int64_t index, float* out) const {
  const Tensor& s = data_.samples;
  const float scale = transform_.scale;
  const auto& mean = transform_.mean_value;
  if (s.dtype() == DType::kF32) {
    const float* src = s.data<float>() + index * sample_size_;
    if (transform_.is_identity()) {
      std::memcpy(out, src, static_cast<size_t>(sample_size_) * sizeof(float));
      return;
    }
    for (int64_t c = 0; c < channels_; ++c) {
      const float m = mean.empty() ? 0.0f : mean[mean.size() == 1 ? 0 : static_cast<size_t>(c)];
      const float* in = src + c * channel_size_;
      float* o = out + c * channel_size_;
      for (int64_t k = 0; k < channel_size_; ++k) o[k] = (in[k] - m) * scale;
    }
  } else {
    const uint8_t* src = s.data<uint8_t>() + index * sample_size_;
    for (int64_t c = 0; c < channels_; ++c) {
      const float m = mean.empty() ? 0.0f : mean[mean.size() == 1 ? 0 : static_cast<size_t>(c)];
      const uint8_t* in = src + c * channel_size_;
      float* o = out + c * channel_size_;
      for (int64_t k = 0; k < channel_size_; ++k) o[k] = (static_cast<float>(in[k]) - m) * scale;
    }
  }
}

void DataSource::next_batch(float* data, float* labels) {
  const std::vector<int64_t>& indices = next_indices();
  const int64_t batch = static_cast<int64_t>(indices.size());
  // Spread over threads only when there is enough to copy (~64K values a chunk).
  const int64_t min_rows = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, sample_size_));
  parallel_for(batch, min_rows, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) copy_sample(indices[static_cast<size_t>(b)], data + b * sample_size_);
  });
  if (labels) {
    STRATA_CHECK(has_labels(), "labels requested from a data set without labels");
    for (int64_t b = 0; b < batch; ++b) {
      labels[b] = static_cast<float>(data_.labels[static_cast<size_t>(indices[static_cast<size_t>(b)])]);
    }
  }
}

// State text, one item per line:
//   strata_data_source 1
//   samples <N> rank <r> world_size <w> shard <n>
//   epoch <e> cursor <c>
//   order <n indices>
//   rng <Rng::save() text>
std::string DataSource::save_state() const {
  std::ostringstream os;
  os << "strata_data_source 1\n"
     << "samples " << num_samples() << " rank " << rank_ << " world_size " << world_size_ << " shard "
     << shard_.size() << "\n"
     << "epoch " << epoch_ << " cursor " << cursor_ << "\n"
     << "order";
  for (int64_t i : order_) os << ' ' << i;
  os << "\nrng " << rng_.save() << "\n";
  return os.str();
}

void DataSource::load_state(const std::string& state) {
  auto corrupt = [&](const std::string& what) {
    fail<Error>(where_, ": cannot restore the data reader from the snapshot: ", what);
  };
  std::istringstream is(state);
  std::string line;
  auto next_line = [&](const char* tag) {
    if (!std::getline(is, line)) corrupt(std::string("missing '") + tag + "' line");
    if (line.compare(0, std::strlen(tag), tag) != 0) {
      corrupt(std::string("expected a '") + tag + "' line, found '" + line.substr(0, 40) + "'");
    }
    return std::istringstream(line.substr(std::strlen(tag)));
  };

  {
    auto ls = next_line("strata_data_source");
    int version = 0;
    if (!(ls >> version) || version != 1) corrupt("unknown state version in '" + line + "'");
  }
  int64_t samples = 0, shard = 0;
  int rank = 0, world = 0;
  {
    auto ls = next_line("samples");
    std::string k1, k2, k3;
    if (!(ls >> samples >> k1 >> rank >> k2 >> world >> k3 >> shard) || k1 != "rank" ||
        k2 != "world_size" || k3 != "shard") {
      corrupt("malformed line '" + line + "'");
    }
  }
  if (samples != num_samples()) {
    corrupt("it was saved for a data set of " + std::to_string(samples) + " samples, this one has " +
            std::to_string(num_samples()));
  }
  if (shard != static_cast<int64_t>(shard_.size()) || (options_.shard == ShardMode::kAuto &&
                                                       (rank != rank_ || world != world_size_))) {
    corrupt("it was saved by rank " + std::to_string(rank) + " of " + std::to_string(world) +
            " (shard of " + std::to_string(shard) + " samples); this is rank " + std::to_string(rank_) +
            " of " + std::to_string(world_size_) + " (shard of " + std::to_string(shard_.size()) +
            "); resume with the same number of ranks");
  }
  int64_t epoch = 0, cursor = 0;
  {
    auto ls = next_line("epoch");
    std::string k;
    if (!(ls >> epoch >> k >> cursor) || k != "cursor" || epoch < 0 || cursor < 0 || cursor >= shard) {
      corrupt("malformed line '" + line + "'");
    }
  }
  std::vector<int64_t> order;
  {
    auto ls = next_line("order");
    order.reserve(static_cast<size_t>(shard));
    int64_t v;
    while (ls >> v) order.push_back(v);
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    if (sorted != shard_) corrupt("the saved order is not a permutation of this rank's samples");
  }
  Rng rng;
  {
    if (!std::getline(is, line) || line.compare(0, 4, "rng ") != 0) corrupt("missing 'rng' line");
    try {
      rng.load(line.substr(4));
    } catch (const Error& e) {
      corrupt(e.what());
    }
  }
  // Commit only once everything parsed, so a failed load leaves the reader as it was.
  order_ = std::move(order);
  epoch_ = epoch;
  cursor_ = cursor;
  rng_ = rng;
}

}  // namespace strata
