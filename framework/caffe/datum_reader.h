// DatumReader: batches from a Caffe database of Datum records (what Caffe's
// Data layer serves), read, decoded and transformed on a prefetch thread
// into a bounded queue.
//
// Order: records in key order, as Caffe reads them; at the end the cursor
// wraps to the first record (batches are always full and may straddle the
// wrap). With ShardMode::kAuto, rank r of w takes the records whose index in
// the database is r modulo w, so the ranks together read each record once
// per pass. rand_skip: before the first batch, a random number of this
// rank's records in [0, rand_skip) is skipped (Caffe's way of making ranks
// or restarted runs start at different places).
//
// Determinism: each sample's random crop and mirror come from a generator
// seeded from (seed, the sample's position in this rank's stream), so a
// reader restored from save_state() produces exactly the batches the
// uninterrupted one would have, whatever the prefetch depth.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "framework/caffe/caffe_db.h"
#include "framework/caffe/caffe_transform.h"
#include "framework/data/data_source.h"  // ShardMode
#include "framework/tensor.h"

namespace strata::caffe {

struct DatumReaderOptions {
  std::string source;
  DbBackend backend = DbBackend::kLeveldb;  // Caffe's default
  int64_t batch_size = 1;
  int prefetch = 4;  // batches kept ready (Caffe's default)
  int64_t rand_skip = 0;
  uint64_t seed = 1;
  int rank = 0;
  int world_size = 1;
  ShardMode shard = ShardMode::kAuto;
  Transform transform;
};

class DatumReader {
 public:
  // Opens the database and reads its first record to learn the sample
  // shape. `where` prefixes error messages.
  DatumReader(const DatumReaderOptions& options, std::string where);
  ~DatumReader();
  DatumReader(const DatumReader&) = delete;
  DatumReader& operator=(const DatumReader&) = delete;

  // [channels, height, width] of one transformed sample.
  const Shape& sample_shape() const { return sample_shape_; }
  int64_t batch_size() const { return options_.batch_size; }

  // The next batch: batch_size x sample values and batch_size labels.
  void next(std::vector<float>* data, std::vector<float>* labels);

  // Samples this rank has consumed since the start (rand_skip included).
  int64_t position() const { return consumed_.position; }

  std::string save_state() const;
  void load_state(const std::string& state);

 private:
  // Where the next record of this rank's stream is.
  struct Cursor {
    std::string key;        // the next record to read; empty: the first record
    int64_t index = 0;      // its index in the database (for sharding)
    int64_t position = 0;   // samples of this rank's stream read before it
    bool skipped = false;   // rand_skip done
  };
  struct Batch {
    std::vector<float> data, labels;
    Cursor after;
    std::exception_ptr error;
  };

  void start();
  void stop();
  void produce();
  // Moves `db` to the next record of this rank's shard (wrapping at the end).
  void advance(DbCursor& db, Cursor& c);
  // Moves `db` to c.key (to this rank's first record, filling c, when empty).
  void place(DbCursor& db, Cursor& c);
  void fill(DbCursor& db, Cursor& c, Batch& b);

  DatumReaderOptions options_;
  std::string where_;
  Shape sample_shape_;
  int64_t sample_size_ = 0;
  Cursor consumed_;  // consumer side
  // Used by the prefetch thread while it runs, by the consumer otherwise.
  std::unique_ptr<DbCursor> db_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> ready_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace strata::caffe
