// LevelDB, opened as Caffe's db_leveldb.cpp opens it (at most 100 open
// files, no creation when reading); writes go through a WriteBatch that
// commit() applies.
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>

#include "framework/caffe/caffe_db.h"
#include "framework/error.h"

#ifdef STRATA_HAVE_LEVELDB
#include <leveldb/db.h>
#include <leveldb/write_batch.h>
#endif

namespace strata::caffe {

#ifdef STRATA_HAVE_LEVELDB

namespace {

// One handle per database folder in this process, shared by its cursors:
// LevelDB locks a database to one open handle (a TRAIN and a TEST net that
// read the same database would otherwise fail). Iterators over one handle
// may run on different threads.
std::shared_ptr<leveldb::DB> shared_db(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<leveldb::DB>> open;
  std::error_code ec;
  std::string key = std::filesystem::weakly_canonical(path, ec).string();
  if (ec) key = path;
  std::lock_guard<std::mutex> lock(mu);
  if (auto db = open[key].lock()) return db;
  leveldb::Options options;
  options.create_if_missing = false;
  options.max_open_files = 100;
  leveldb::DB* raw = nullptr;
  const leveldb::Status s = leveldb::DB::Open(options, path, &raw);
  if (!s.ok()) fail<IoError>("cannot open LEVELDB database '", path, "': ", s.ToString());
  std::shared_ptr<leveldb::DB> db(raw);
  open[key] = db;
  return db;
}

class LeveldbCursor : public DbCursor {
 public:
  explicit LeveldbCursor(const std::string& path) : db_(shared_db(path)) {
    leveldb::ReadOptions read;
    read.fill_cache = false;  // one sequential pass: caching evicts what will be read next
    it_.reset(db_->NewIterator(read));
    it_->SeekToFirst();
  }

  void seek_first() override { it_->SeekToFirst(); }
  void seek(std::string_view key) override { it_->Seek(leveldb::Slice(key.data(), key.size())); }
  bool valid() const override { return it_->Valid(); }
  void next() override { it_->Next(); }
  std::string_view key() const override {
    const leveldb::Slice k = it_->key();
    return {k.data(), k.size()};
  }
  std::string_view value() const override {
    const leveldb::Slice v = it_->value();
    return {v.data(), v.size()};
  }

 private:
  std::shared_ptr<leveldb::DB> db_;  // declared first: the iterator goes before its database
  std::unique_ptr<leveldb::Iterator> it_;
};

class LeveldbWriter : public DbWriter {
 public:
  explicit LeveldbWriter(const std::string& path) : path_(path) {
    leveldb::Options options;
    options.create_if_missing = true;
    options.error_if_exists = true;
    options.write_buffer_size = 64 << 20;
    leveldb::DB* db = nullptr;
    const leveldb::Status s = leveldb::DB::Open(options, path, &db);
    if (!s.ok()) fail<IoError>("cannot create LEVELDB database '", path, "': ", s.ToString());
    db_.reset(db);
  }
  ~LeveldbWriter() override {
    try {
      commit();
    } catch (...) {
      // A destructor never throws; callers that care call commit() themselves.
    }
  }

  void put(std::string_view key, std::string_view value) override {
    batch_.Put(leveldb::Slice(key.data(), key.size()), leveldb::Slice(value.data(), value.size()));
  }
  void commit() override {
    const leveldb::Status s = db_->Write(leveldb::WriteOptions(), &batch_);
    if (!s.ok()) fail<IoError>("LEVELDB database '", path_, "': writing records failed: ", s.ToString());
    batch_.Clear();
  }

 private:
  std::string path_;
  std::unique_ptr<leveldb::DB> db_;
  leveldb::WriteBatch batch_;
};

}  // namespace

std::unique_ptr<DbCursor> open_leveldb_cursor(const std::string& path) {
  return std::make_unique<LeveldbCursor>(path);
}
std::unique_ptr<DbWriter> create_leveldb(const std::string& path) { return std::make_unique<LeveldbWriter>(path); }

#else

std::unique_ptr<DbCursor> open_leveldb_cursor(const std::string& path) {
  fail<IoError>("cannot open LEVELDB database '", path, "': strata was built without leveldb");
}
std::unique_ptr<DbWriter> create_leveldb(const std::string& path) {
  fail<IoError>("cannot create LEVELDB database '", path, "': strata was built without leveldb");
}

#endif

}  // namespace strata::caffe
