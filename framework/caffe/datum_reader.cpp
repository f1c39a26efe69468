#include "framework/caffe/datum_reader.h"

#include <cctype>
#include <cstring>
#include <sstream>
#include <utility>

#include "framework/error.h"

namespace strata::caffe {

namespace {

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A key as it can be shown: printable bytes as is, others as \xNN.
std::string printable(std::string_view key) {
  std::string s;
  for (char ch : key) {
    const auto u = static_cast<unsigned char>(ch);
    if (std::isprint(u) && ch != '\'') {
      s.push_back(ch);
    } else {
      static const char* hex = "0123456789abcdef";
      s += "\\x";
      s.push_back(hex[u >> 4]);
      s.push_back(hex[u & 15]);
    }
  }
  return s;
}

std::string to_hex(const std::string& s) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    out.push_back(hex[u >> 4]);
    out.push_back(hex[u & 15]);
  }
  return out.empty() ? "-" : out;
}

bool from_hex(const std::string& h, std::string* out) {
  out->clear();
  if (h == "-") return true;
  if (h.size() % 2) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < h.size(); i += 2) {
    const int a = nibble(h[i]), b = nibble(h[i + 1]);
    if (a < 0 || b < 0) return false;
    out->push_back(static_cast<char>(a * 16 + b));
  }
  return true;
}

}  // namespace

DatumReader::DatumReader(const DatumReaderOptions& options, std::string where)
    : options_(options), where_(std::move(where)) {
  STRATA_CHECK(options_.batch_size > 0, "batch_size must be positive");
  STRATA_CHECK(options_.world_size >= 1 && options_.rank >= 0 && options_.rank < options_.world_size, "rank ",
               options_.rank, " outside world of ", options_.world_size);
  if (options_.prefetch < 1) options_.prefetch = 1;
  if (options_.shard == ShardMode::kNone) {
    options_.rank = 0;
    options_.world_size = 1;
  }
  try {
    db_ = open_db_cursor(options_.source, options_.backend);
  } catch (const IoError& e) {
    fail<IoError>(where_, ": ", e.what());
  }
  if (!db_->valid()) {
    fail<ConfigError>(where_, ": ", db_backend_name(options_.backend), " database '", options_.source,
                      "' holds no records");
  }
  // The sample shape comes from the first record, as Caffe's Data layer infers it.
  const std::string what = where_ + ": record '" + printable(db_->key()) + "' of " +
                           db_backend_name(options_.backend) + " '" + options_.source + "'";
  const Image first = from_datum(parse_datum(db_->value(), what), options_.transform.color, what);
  int h = 0, w = 0;
  output_size(options_.transform, first, &h, &w, what);
  sample_shape_ = {first.channels, h, w};
  sample_size_ = int64_t{first.channels} * h * w;
  place(*db_, consumed_);
}

DatumReader::~DatumReader() { stop(); }

void DatumReader::place(DbCursor& db, Cursor& c) {
  if (c.key.empty()) {
    db.seek_first();
    int64_t index = 0;
    while (db.valid() && index % options_.world_size != options_.rank) {
      db.next();
      ++index;
    }
    if (!db.valid()) {
      fail<ConfigError>(where_, ": ", db_backend_name(options_.backend), " database '", options_.source, "' has ",
                        index, " records, too few to give rank ", options_.rank, " of ", options_.world_size,
                        " any; use more records or data_param { shard: NONE }");
    }
    c.index = index;
    c.key = std::string(db.key());
    return;
  }
  db.seek(c.key);
  if (!db.valid() || db.key() != c.key) {
    fail<Error>(where_, ": cannot resume reading ", db_backend_name(options_.backend), " database '",
                options_.source, "': record '", printable(c.key),
                "' saved in the snapshot is no longer there; the database changed since the snapshot");
  }
}

void DatumReader::advance(DbCursor& db, Cursor& c) {
  for (int i = 0; i < options_.world_size; ++i) {
    db.next();
    ++c.index;
    if (!db.valid()) {  // wrap to the first record, as Caffe's reader does
      db.seek_first();
      c.index = 0;
      while (db.valid() && c.index % options_.world_size != options_.rank) {
        db.next();
        ++c.index;
      }
      break;
    }
  }
  if (!db.valid()) fail<IoError>(where_, ": database '", options_.source, "' lost its records while being read");
  c.key = std::string(db.key());
}

void DatumReader::fill(DbCursor& db, Cursor& c, Batch& b) {
  if (!c.skipped) {
    c.skipped = true;
    if (options_.rand_skip > 0) {
      Rng rng(splitmix(options_.seed ^ 0x72616e645f736b69ULL));
      const int64_t skip = static_cast<int64_t>(rng.uniform_int(static_cast<uint64_t>(options_.rand_skip)));
      for (int64_t i = 0; i < skip; ++i) {
        advance(db, c);
        ++c.position;
      }
    }
  }
  b.data.resize(static_cast<size_t>(options_.batch_size * sample_size_));
  b.labels.resize(static_cast<size_t>(options_.batch_size));
  for (int64_t row = 0; row < options_.batch_size; ++row) {
    const std::string what = where_ + ": record '" + printable(db.key()) + "' of " +
                             db_backend_name(options_.backend) + " '" + options_.source + "'";
    const Datum d = parse_datum(db.value(), what);
    const Image img = from_datum(d, options_.transform.color, what);
    int h = 0, w = 0;
    output_size(options_.transform, img, &h, &w, what);
    if (img.channels != sample_shape_[0] || h != sample_shape_[1] || w != sample_shape_[2]) {
      fail<ShapeError>(what, ": becomes [", img.channels, ", ", h, ", ", w, "] after the transform, but the first "
                       "record made ", shape_str(sample_shape_), "; every record must have the same size (or set "
                       "transform_param { crop_size })");
    }
    Rng rng(splitmix(splitmix(options_.seed) ^ static_cast<uint64_t>(c.position)));
    apply(options_.transform, img, &rng, b.data.data() + row * sample_size_, what);
    b.labels[static_cast<size_t>(row)] = static_cast<float>(d.label);
    ++c.position;
    advance(db, c);
  }
}

void DatumReader::start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = false;
    ready_.clear();
  }
  place(*db_, consumed_);
  thread_ = std::thread([this] { produce(); });
}

void DatumReader::stop() {
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  std::lock_guard<std::mutex> lock(mu_);
  ready_.clear();
}

void DatumReader::produce() {
  Cursor c = consumed_;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || static_cast<int>(ready_.size()) < options_.prefetch; });
      if (stopping_) return;
    }
    Batch b;
    try {
      fill(*db_, c, b);
    } catch (...) {
      b.error = std::current_exception();
    }
    b.after = c;
    const bool failed = static_cast<bool>(b.error);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      ready_.push_back(std::move(b));
    }
    cv_.notify_all();
    if (failed) return;
  }
}

void DatumReader::next(std::vector<float>* data, std::vector<float>* labels) {
  if (!thread_.joinable()) start();
  Batch b;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !ready_.empty(); });
    if (ready_.front().error) {
      b.error = ready_.front().error;  // stays at the front: later calls see it again
    } else {
      b = std::move(ready_.front());
      ready_.pop_front();
    }
  }
  cv_.notify_all();
  if (b.error) std::rethrow_exception(b.error);
  consumed_ = b.after;
  std::swap(*data, b.data);
  if (labels) std::swap(*labels, b.labels);
}

// State text:
//   strata_caffe_data 1
//   rank <r> world_size <w> seed <s> position <p> index <i> skipped <0|1>
//   key <hex of the next record's key, or ->
std::string DatumReader::save_state() const {
  std::ostringstream os;
  os << "strata_caffe_data 1\nrank " << options_.rank << " world_size " << options_.world_size << " seed "
     << options_.seed << " position " << consumed_.position << " index " << consumed_.index << " skipped "
     << (consumed_.skipped ? 1 : 0) << "\nkey " << to_hex(consumed_.key) << "\n";
  return os.str();
}

void DatumReader::load_state(const std::string& state) {
  auto corrupt = [&](const std::string& what) {
    fail<Error>(where_, ": cannot restore the database reader from the snapshot: ", what);
  };
  std::istringstream is(state);
  std::string tag, k[6], hex;
  int version = 0, rank = -1, world = -1, skipped = 0;
  uint64_t seed = 0;
  Cursor c;
  if (!(is >> tag >> version) || tag != "strata_caffe_data" || version != 1) corrupt("not a Data layer state");
  if (!(is >> k[0] >> rank >> k[1] >> world >> k[2] >> seed >> k[3] >> c.position >> k[4] >> c.index >> k[5] >>
        skipped) ||
      k[0] != "rank" || k[1] != "world_size" || k[2] != "seed" || k[3] != "position" || k[4] != "index" ||
      k[5] != "skipped" || c.position < 0 || c.index < 0) {
    corrupt("malformed position line");
  }
  if (!(is >> tag >> hex) || tag != "key" || !from_hex(hex, &c.key)) corrupt("malformed key line");
  c.skipped = skipped != 0;
  if (rank != options_.rank || world != options_.world_size) {
    corrupt("it was saved by rank " + std::to_string(rank) + " of " + std::to_string(world) + "; this is rank " +
            std::to_string(options_.rank) + " of " + std::to_string(options_.world_size) +
            "; resume with the same number of ranks");
  }
  if (seed != options_.seed) corrupt("it was saved with another seed; resume with the same seed");
  stop();
  place(*db_, c);  // checks that the record is still there
  consumed_ = c;
}

}  // namespace strata::caffe
