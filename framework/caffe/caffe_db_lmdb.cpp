// LMDB, opened as Caffe's db_lmdb.cpp opens it: the path is a folder holding
// data.mdb and lock.mdb; readers use one read-only transaction for the whole
// pass (MDB_RDONLY | MDB_NOTLS), retried without the lock file when the
// folder is not writable (a database on a read-only share).
#include <cerrno>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "framework/caffe/caffe_db.h"
#include "framework/error.h"

#ifdef STRATA_HAVE_LMDB
#include <lmdb.h>
#endif

namespace strata::caffe {

#ifdef STRATA_HAVE_LMDB

namespace {

[[noreturn]] void lmdb_fail(const std::string& path, const char* call, int rc) {
  fail<IoError>("LMDB database '", path, "': ", call, " failed: ", mdb_strerror(rc));
}

// One environment per database folder in this process, shared by its
// cursors: LMDB forbids opening the same environment twice in one process
// (closing one would drop the other's locks).
struct LmdbEnv {
  MDB_env* env = nullptr;
  ~LmdbEnv() {
    if (env) mdb_env_close(env);
  }
};

std::shared_ptr<LmdbEnv> shared_env(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<LmdbEnv>> open;
  std::error_code ec;
  std::string key = std::filesystem::weakly_canonical(path, ec).string();
  if (ec) key = path;
  std::lock_guard<std::mutex> lock(mu);
  if (auto env = open[key].lock()) return env;
  auto env = std::make_shared<LmdbEnv>();
  int rc = mdb_env_create(&env->env);
  if (rc != 0) lmdb_fail(path, "mdb_env_create", rc);
  rc = mdb_env_open(env->env, path.c_str(), MDB_RDONLY | MDB_NOTLS, 0664);
  if (rc == EACCES) rc = mdb_env_open(env->env, path.c_str(), MDB_RDONLY | MDB_NOTLS | MDB_NOLOCK, 0664);
  if (rc != 0) fail<IoError>("cannot open LMDB database '", path, "': ", mdb_strerror(rc));
  open[key] = env;
  return env;
}

class LmdbCursor : public DbCursor {
 public:
  explicit LmdbCursor(const std::string& path) : path_(path) {
    std::error_code ec;
    if (!std::filesystem::is_directory(path, ec)) {
      fail<IoError>("cannot open LMDB database '", path, "': not a folder (an LMDB database is a folder "
                    "holding data.mdb and lock.mdb)");
    }
    env_ = shared_env(path);
    check(mdb_txn_begin(env_->env, nullptr, MDB_RDONLY, &txn_), "mdb_txn_begin");
    check(mdb_dbi_open(txn_, nullptr, 0, &dbi_), "mdb_dbi_open");
    check(mdb_cursor_open(txn_, dbi_, &cursor_), "mdb_cursor_open");
    seek_first();
  }
  ~LmdbCursor() override {
    if (cursor_) mdb_cursor_close(cursor_);
    if (txn_) mdb_txn_abort(txn_);
  }
  LmdbCursor(const LmdbCursor&) = delete;
  LmdbCursor& operator=(const LmdbCursor&) = delete;

  void seek_first() override { get(MDB_FIRST); }
  void seek(std::string_view key) override {
    key_.mv_size = key.size();
    key_.mv_data = const_cast<char*>(key.data());
    get(MDB_SET_RANGE);
  }
  bool valid() const override { return valid_; }
  void next() override { get(MDB_NEXT); }
  std::string_view key() const override {
    return {static_cast<const char*>(key_.mv_data), key_.mv_size};
  }
  std::string_view value() const override {
    return {static_cast<const char*>(value_.mv_data), value_.mv_size};
  }

 private:
  void check(int rc, const char* call) {
    if (rc == 0) return;
    if (cursor_) mdb_cursor_close(cursor_);
    if (txn_) mdb_txn_abort(txn_);
    cursor_ = nullptr;
    txn_ = nullptr;
    lmdb_fail(path_, call, rc);
  }
  void get(MDB_cursor_op op) {
    const int rc = mdb_cursor_get(cursor_, &key_, &value_, op);
    if (rc == MDB_NOTFOUND) {
      valid_ = false;
      return;
    }
    if (rc != 0) lmdb_fail(path_, "mdb_cursor_get", rc);
    valid_ = true;
  }

  std::string path_;
  std::shared_ptr<LmdbEnv> env_;
  MDB_txn* txn_ = nullptr;
  MDB_dbi dbi_ = 0;
  MDB_cursor* cursor_ = nullptr;
  MDB_val key_{}, value_{};
  bool valid_ = false;
};

class LmdbWriter : public DbWriter {
 public:
  explicit LmdbWriter(const std::string& path) : path_(path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::exists(fs::path(path) / "data.mdb", ec)) {
      fail<IoError>("cannot create LMDB database '", path, "': one exists there already; remove it first");
    }
    fs::create_directories(path, ec);
    if (ec) fail<IoError>("cannot create folder '", path, "' for an LMDB database: ", ec.message());
    int rc = mdb_env_create(&env_);
    if (rc != 0) lmdb_fail(path, "mdb_env_create", rc);
    rc = mdb_env_set_mapsize(env_, map_size_);
    if (rc == 0) rc = mdb_env_open(env_, path.c_str(), 0, 0664);
    if (rc != 0) {
      mdb_env_close(env_);
      lmdb_fail(path, "mdb_env_open", rc);
    }
  }
  ~LmdbWriter() override {
    try {
      commit();
    } catch (...) {
      // A destructor never throws; callers that care call commit() themselves.
    }
    mdb_env_close(env_);
  }
  LmdbWriter(const LmdbWriter&) = delete;
  LmdbWriter& operator=(const LmdbWriter&) = delete;

  void put(std::string_view key, std::string_view value) override {
    pending_.emplace_back(std::string(key), std::string(value));
  }

  // Grows the map and retries when it is full, as Caffe's writer does.
  void commit() override {
    if (pending_.empty()) return;
    for (;;) {
      MDB_txn* txn = nullptr;
      MDB_dbi dbi = 0;
      int rc = mdb_txn_begin(env_, nullptr, 0, &txn);
      if (rc != 0) lmdb_fail(path_, "mdb_txn_begin", rc);
      rc = mdb_dbi_open(txn, nullptr, 0, &dbi);
      for (size_t i = 0; rc == 0 && i < pending_.size(); ++i) {
        MDB_val k{pending_[i].first.size(), pending_[i].first.data()};
        MDB_val v{pending_[i].second.size(), pending_[i].second.data()};
        rc = mdb_put(txn, dbi, &k, &v, 0);
      }
      if (rc == 0) {
        rc = mdb_txn_commit(txn);
      } else {
        mdb_txn_abort(txn);
      }
      if (rc == MDB_MAP_FULL) {
        map_size_ *= 2;
        rc = mdb_env_set_mapsize(env_, map_size_);
        if (rc != 0) lmdb_fail(path_, "mdb_env_set_mapsize", rc);
        continue;
      }
      if (rc != 0) lmdb_fail(path_, "writing records", rc);
      break;
    }
    pending_.clear();
  }

 private:
  std::string path_;
  MDB_env* env_ = nullptr;
  size_t map_size_ = size_t{1} << 26;
  std::vector<std::pair<std::string, std::string>> pending_;
};

}  // namespace

std::unique_ptr<DbCursor> open_lmdb_cursor(const std::string& path) { return std::make_unique<LmdbCursor>(path); }
std::unique_ptr<DbWriter> create_lmdb(const std::string& path) { return std::make_unique<LmdbWriter>(path); }

#else

std::unique_ptr<DbCursor> open_lmdb_cursor(const std::string& path) {
  fail<IoError>("cannot open LMDB database '", path, "': strata was built without liblmdb");
}
std::unique_ptr<DbWriter> create_lmdb(const std::string& path) {
  fail<IoError>("cannot create LMDB database '", path, "': strata was built without liblmdb");
}

#endif

}  // namespace strata::caffe
