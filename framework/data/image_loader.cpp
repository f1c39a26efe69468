#include "framework/data/image_loader.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "framework/error.h"
#include "framework/io/file_util.h"
#include "framework/cpu/threads.h"
#include "framework/data/image_decode.h"

namespace strata {

// ---- seeds -------------------------------------------------------------------

namespace {

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::vector<int64_t> ImageLoader::epoch_order(int64_t epoch) const {
  std::vector<int64_t> order = shard_;
  if (options_.shuffle == ShuffleMode::kOn) {
    Rng rng(splitmix(splitmix(options_.seed ^ 0x6f726465725f5f5fULL) ^ static_cast<uint64_t>(epoch)));
    for (size_t i = order.size(); i > 1; --i) {
      const size_t j = static_cast<size_t>(rng.uniform_int(i));
      std::swap(order[i - 1], order[j]);
    }
  }
  return order;
}

uint64_t ImageLoader::sample_seed(int64_t epoch, int64_t index) const {
  return splitmix(splitmix(splitmix(options_.seed) ^ static_cast<uint64_t>(epoch)) ^ static_cast<uint64_t>(index));
}

// ---- the loader ----------------------------------------------------------------

ImageLoader::ImageLoader(std::vector<ImageItem> items, const ImageTransform& transform,
                         const ImageLoaderOptions& options, std::string where)
    : items_(std::move(items)), transform_(transform), options_(options), where_(std::move(where)) {
  STRATA_CHECK(options_.batch_size > 0, "batch_size must be positive");
  STRATA_CHECK(options_.out_height > 0 && options_.out_width > 0, "output size must be set");
  STRATA_CHECK(options_.world_size >= 1 && options_.rank >= 0 && options_.rank < options_.world_size, "rank ",
               options_.rank, " outside world of ", options_.world_size);
  if (options_.prefetch < 1) options_.prefetch = 1;
  if (items_.empty()) fail<ConfigError>(where_, ": no images to read");
  const int64_t n = static_cast<int64_t>(items_.size());
  const bool sharded = options_.shard == ShardMode::kAuto;
  for (int64_t i = sharded ? options_.rank : 0; i < n; i += sharded ? options_.world_size : 1) shard_.push_back(i);
  if (shard_.empty()) {
    fail<ConfigError>(where_, ": ", n, " images are too few to give rank ", options_.rank, " of ",
                      options_.world_size, " any; use more images or shard: NONE");
  }
  sample_floats_ = int64_t{options_.out_channels} * options_.out_height * options_.out_width;
  if (!options_.on_skip) {
    options_.on_skip = [](const std::string& msg) { std::fprintf(stderr, "warning: %s\n", msg.c_str()); };
  }
}

ImageLoader::~ImageLoader() { stop(); }

std::set<int64_t> ImageLoader::skipped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bad_;
}

void ImageLoader::set_skipped(const std::set<int64_t>& skipped) {
  stop();
  std::lock_guard<std::mutex> lock(mu_);
  bad_ = skipped;
}

void ImageLoader::start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = false;
    finished_ = false;
    ready_.clear();
  }
  produce_pos_ = position_;
  const int threads = options_.threads > 0 ? options_.threads : hardware_threads();
  workers_stop_ = false;
  for (int t = 1; t < threads; ++t) workers_.emplace_back([this] { worker_loop(); });
  coordinator_ = std::thread([this] { produce(); });
}

void ImageLoader::stop() {
  if (coordinator_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    coordinator_.join();
  }
  if (!workers_.empty()) {
    {
      std::lock_guard<std::mutex> lock(job_mu_);
      workers_stop_ = true;
    }
    job_cv_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }
  std::lock_guard<std::mutex> lock(mu_);
  ready_.clear();
  finished_ = false;
}

void ImageLoader::seek(int64_t position) {
  STRATA_CHECK(position >= 0, "negative reading position ", position);
  stop();
  position_ = position;
}

bool ImageLoader::next(ImageBatch& batch) {
  if (!coordinator_.joinable()) start();
  ImageBatch b;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !ready_.empty(); });
    // An error or the end stays at the front, so later calls see it again.
    if (ready_.front().error || ready_.front().end) {
      b.error = ready_.front().error;
      b.end = ready_.front().end;
    } else {
      b = std::move(ready_.front());
      ready_.pop_front();
    }
  }
  cv_.notify_all();
  if (b.error) std::rethrow_exception(b.error);
  if (b.end) return false;
  position_ = b.end_position;
  std::swap(batch, b);
  return true;
}

void ImageLoader::produce() {
  int64_t pos = produce_pos_;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || static_cast<int>(ready_.size()) < options_.prefetch; });
      if (stopping_) return;
    }
    ImageBatch b;
    try {
      fill_batch(pos, b);
    } catch (...) {
      b.error = std::current_exception();
    }
    b.end_position = pos;
    if (options_.epochs == EpochMode::kOnce && b.rows == 0 && !b.error) b.end = true;
    const bool last = b.error || b.end;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      ready_.push_back(std::move(b));
    }
    cv_.notify_all();
    if (last) return;
  }
}

int64_t ImageLoader::item_at(int64_t position) {
  const int64_t n = static_cast<int64_t>(shard_.size());
  const int64_t epoch = position / n;
  if (epoch != cached_epoch_) {
    cached_order_ = epoch_order(epoch);
    cached_epoch_ = epoch;
  }
  return cached_order_[static_cast<size_t>(position % n)];
}

void ImageLoader::fill_batch(int64_t& pos, ImageBatch& batch) {
  const int64_t batch_size = options_.batch_size;
  const int64_t n = static_cast<int64_t>(shard_.size());
  const bool once = options_.epochs == EpochMode::kOnce;
  batch.data.resize(static_cast<size_t>(batch_size * sample_floats_));
  batch.labels.assign(static_cast<size_t>(batch_size), 0.0f);
  batch.items.assign(static_cast<size_t>(batch_size), -1);
  batch.rows = 0;

  struct Candidate {
    int64_t item;
    int64_t epoch;
  };
  std::vector<Candidate> cands;
  while (batch.rows < batch_size && !(once && pos >= n)) {
    cands.clear();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (static_cast<int64_t>(bad_.size()) >= n) {
        fail<IoError>(where_, ": all ", n, " images are unreadable");
      }
      while (static_cast<int64_t>(cands.size()) < batch_size - batch.rows && !(once && pos >= n)) {
        const int64_t item = item_at(pos);
        const int64_t epoch = pos / n;
        ++pos;
        if (bad_.count(item)) continue;
        cands.push_back({item, epoch});
      }
    }
    const int64_t first_row = batch.rows;
    std::vector<std::exception_ptr> bad(cands.size()), fatal(cands.size());
    run_jobs(static_cast<int64_t>(cands.size()), [&](int64_t j) {
      const Candidate& c = cands[static_cast<size_t>(j)];
      const std::string& path = items_[static_cast<size_t>(c.item)].path;
      float* row = batch.data.data() + (first_row + j) * sample_floats_;
      try {
        RgbImage img;
        try {
          img = decode_image_file(path);
        } catch (const IoError& e) {
          bad[static_cast<size_t>(j)] = std::make_exception_ptr(IoError(where_ + ": " + e.what()));
          return;
        }
        Rng rng(sample_seed(c.epoch, c.item));
        if (options_.custom_transform) {
          options_.custom_transform(img, path, rng, row);
          return;
        }
        int ow = 0, oh = 0;
        transform_output_size(transform_, img.width, img.height, &ow, &oh);
        if (ow != options_.out_width || oh != options_.out_height) {
          fail<ConfigError>(where_, ": ", path, " (", img.width, "x", img.height, ") becomes ", ow, "x", oh,
                            " after the transform, but every image must become ", options_.out_width, "x",
                            options_.out_height, "; set a crop size");
        }
        apply_transform(img, transform_, &rng, row);
      } catch (...) {
        fatal[static_cast<size_t>(j)] = std::current_exception();
      }
    });
    for (size_t j = 0; j < cands.size(); ++j) {
      if (fatal[j]) std::rethrow_exception(fatal[j]);
      if (bad[j]) {
        if (options_.bad_images == BadImages::kError) std::rethrow_exception(bad[j]);
        size_t count;
        {
          std::lock_guard<std::mutex> lock(mu_);
          bad_.insert(cands[j].item);
          count = bad_.size();
        }
        std::string reason;
        try {
          std::rethrow_exception(bad[j]);
        } catch (const Error& e) {
          reason = e.what();
        }
        options_.on_skip("skipping unreadable image (skip_bad_images): " + reason + " [" + std::to_string(count) +
                         " skipped so far]");
        continue;
      }
      const int64_t src = first_row + static_cast<int64_t>(j);
      if (src != batch.rows) {
        std::memmove(batch.data.data() + batch.rows * sample_floats_, batch.data.data() + src * sample_floats_,
                     static_cast<size_t>(sample_floats_) * sizeof(float));
      }
      const ImageItem& item = items_[static_cast<size_t>(cands[j].item)];
      batch.labels[static_cast<size_t>(batch.rows)] = static_cast<float>(item.label);
      batch.items[static_cast<size_t>(batch.rows)] = cands[j].item;
      ++batch.rows;
    }
  }
}

void ImageLoader::run_jobs(int64_t n, const std::function<void(int64_t)>& job) {
  if (workers_.empty() || n <= 1) {
    for (int64_t i = 0; i < n; ++i) job(i);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(job_mu_);
    job_ = &job;
    job_n_ = n;
    job_next_ = 0;
    job_done_ = 0;
  }
  job_cv_.notify_all();
  std::unique_lock<std::mutex> lock(job_mu_);
  while (job_next_ < job_n_) {
    const int64_t i = job_next_++;
    lock.unlock();
    job(i);
    lock.lock();
    ++job_done_;
  }
  job_done_cv_.wait(lock, [&] { return job_done_ == job_n_; });
  job_ = nullptr;
}

void ImageLoader::worker_loop() {
  std::unique_lock<std::mutex> lock(job_mu_);
  for (;;) {
    job_cv_.wait(lock, [&] { return workers_stop_ || (job_ && job_next_ < job_n_); });
    if (workers_stop_) return;
    const int64_t i = job_next_++;
    const std::function<void(int64_t)>* fn = job_;
    lock.unlock();
    (*fn)(i);
    lock.lock();
    if (++job_done_ == job_n_) job_done_cv_.notify_all();
  }
}

}  // namespace strata
