// ImageLoader, which decodes and transforms images on a pool of threads into
// a bounded queue of prefetched batches.
//
// Determinism: the reading order and every sample's randomness are pure
// functions of (seed, epoch, sample index): epoch e's order is shuffled by a
// generator seeded from (seed, e), and sample i's random crop and flip in
// epoch e come from a generator seeded from (seed, e, i). So the batches do
// not depend on the number of threads or their timing, and a reader restarted
// at a saved position produces exactly what the uninterrupted one would have.
//
// Positions count samples read since epoch 0, over this rank's shard: the
// sample at position p is order(p / n)[p % n] for a shard of n samples.
// Batches are always full in kRepeat mode (one may straddle two epochs, as in
// the other data layers); in kOnce mode the shard is read once, in order,
// and the last batch may be short.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "framework/data/data_source.h"
#include "framework/data/image_sources.h"
#include "framework/data/image_transform.h"

namespace strata {

enum class BadImages { kError, kSkip };
enum class EpochMode { kRepeat, kOnce };

struct ImageLoaderOptions {
  int64_t batch_size = 1;
  ShuffleMode shuffle = ShuffleMode::kOff;
  uint64_t seed = 1;
  int rank = 0;
  int world_size = 1;
  ShardMode shard = ShardMode::kAuto;
  int threads = 0;   // decode threads; 0 = one per core
  int prefetch = 2;  // finished batches kept ready (>= 1)
  BadImages bad_images = BadImages::kError;
  EpochMode epochs = EpochMode::kRepeat;
  int out_height = 0;  // what the transform must produce for every image
  int out_width = 0;
  int out_channels = 3;
  // Replaces the ImageTransform when set (Caffe's DataTransformer for an
  // ImageData layer in Caffe's spelling): writes out_channels x out_height x
  // out_width floats for one decoded image, or throws an Error naming `path`.
  std::function<void(const RgbImage& img, const std::string& path, Rng& rng, float* out)> custom_transform;
  // Called (from the loader's thread) for each unreadable image skipped
  // with kSkip, with a message naming the path and the count so far.
  // Default: a warning line on stderr.
  std::function<void(const std::string&)> on_skip;
};

struct ImageBatch {
  int64_t rows = 0;               // filled rows (batch_size except a short last batch in kOnce)
  std::vector<float> data;        // rows x out_channels x out_height x out_width
  std::vector<float> labels;      // rows
  std::vector<int64_t> items;     // index into the item list, per row
  int64_t end_position = 0;       // reading position after this batch
  bool end = false;               // kOnce: nothing left
  std::exception_ptr error;       // an unreadable image (kError): rethrown by next()
};

class ImageLoader {
 public:
  // `where` prefixes error messages.
  ImageLoader(std::vector<ImageItem> items, const ImageTransform& transform, const ImageLoaderOptions& options,
              std::string where);
  ~ImageLoader();
  ImageLoader(const ImageLoader&) = delete;
  ImageLoader& operator=(const ImageLoader&) = delete;

  // The next batch (swapped into `batch`); false when a kOnce pass is done.
  // Rethrows the IoError of an unreadable image (kError), naming its path.
  bool next(ImageBatch& batch);

  // Position after the last batch next() returned.
  int64_t position() const { return position_; }
  // Drops prefetched batches and continues from `position` (a value that
  // position() returned, e.g. from a snapshot).
  void seek(int64_t position);

  const std::vector<ImageItem>& items() const { return items_; }
  // The item indices this rank reads, ascending.
  const std::vector<int64_t>& shard() const { return shard_; }
  int64_t batch_size() const { return options_.batch_size; }
  // Unreadable images skipped so far (kSkip), by item index.
  std::set<int64_t> skipped() const;
  // Marks items as unreadable without decoding them (restoring a snapshot).
  void set_skipped(const std::set<int64_t>& skipped);

  // The shard's order in `epoch` (a pure function of seed and epoch).
  std::vector<int64_t> epoch_order(int64_t epoch) const;
  // The seed of item `index`'s random transform in `epoch`.
  uint64_t sample_seed(int64_t epoch, int64_t index) const;

 private:
  void start();
  void stop();
  void produce();  // the coordinator thread
  void fill_batch(int64_t& pos, ImageBatch& batch);
  // Runs job(i) for i in [0, n) on the decode threads (the caller included).
  void run_jobs(int64_t n, const std::function<void(int64_t)>& job);
  void worker_loop();
  int64_t item_at(int64_t position);  // coordinator only (caches the epoch order)

  std::vector<ImageItem> items_;
  ImageTransform transform_;
  ImageLoaderOptions options_;
  std::string where_;
  std::vector<int64_t> shard_;
  int64_t sample_floats_ = 0;
  int64_t position_ = 0;      // consumer side
  int64_t produce_pos_ = 0;   // coordinator side

  // Coordinator <-> consumer.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ImageBatch> ready_;
  bool stopping_ = false;
  bool finished_ = false;  // the coordinator has produced its last batch
  std::thread coordinator_;
  std::set<int64_t> bad_;  // guarded by mu_

  // Coordinator <-> decode workers.
  std::mutex job_mu_;
  std::condition_variable job_cv_, job_done_cv_;
  const std::function<void(int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0, job_next_ = 0, job_done_ = 0;
  uint64_t job_generation_ = 0;
  bool workers_stop_ = false;
  std::vector<std::thread> workers_;

  int64_t cached_epoch_ = -1;
  std::vector<int64_t> cached_order_;
};

}  // namespace strata
