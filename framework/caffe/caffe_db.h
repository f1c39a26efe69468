// Caffe's key-value databases (LMDB and LevelDB, as caffe/util/db.hpp opens
// them): a cursor over the records in key order, and a writer (for tools
// and tests that make databases as Caffe's convert_* programs do).
//
// Each backend is built when its library was found at build time
// (liblmdb-dev, libleveldb-dev); asking for one that was not is an IoError
// saying which package to install. A database that cannot be opened is an
// IoError naming the path and the backend.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace strata::caffe {

enum class DbBackend { kLmdb, kLeveldb };

// "LMDB" / "LEVELDB" (Caffe's data_param backend spelling, any case).
DbBackend parse_db_backend(const std::string& text);
const char* db_backend_name(DbBackend backend);
bool db_backend_available(DbBackend backend);

// Records in key order. key() and value() stay valid until the cursor moves.
class DbCursor {
 public:
  virtual ~DbCursor() = default;
  virtual void seek_first() = 0;
  // To the first record whose key is >= `key` (invalid when there is none).
  virtual void seek(std::string_view key) = 0;
  virtual bool valid() const = 0;
  virtual void next() = 0;
  virtual std::string_view key() const = 0;
  virtual std::string_view value() const = 0;
};

// Caffe resolves the paths in a net (sources, mean files) from the working
// directory, its users' Caffe root; strata resolves them beside the config
// file. A relative path is taken from the working directory when something
// is there, else beside the config (`base_dir`), so both layouts run.
std::string resolve_caffe_path(const std::string& base_dir, const std::string& path);

// Opens `path` read-only, positioned at the first record.
std::unique_ptr<DbCursor> open_db_cursor(const std::string& path, DbBackend backend);

class DbWriter {
 public:
  virtual ~DbWriter() = default;
  virtual void put(std::string_view key, std::string_view value) = 0;
  // Writes what put() collected so far (Caffe commits every 1000 records).
  virtual void commit() = 0;
};

// Creates a new database at `path` (an error if one is there already).
std::unique_ptr<DbWriter> create_db(const std::string& path, DbBackend backend);

// Backends (framework/caffe/caffe_db_lmdb.cpp, caffe_db_leveldb.cpp).
std::unique_ptr<DbCursor> open_lmdb_cursor(const std::string& path);
std::unique_ptr<DbWriter> create_lmdb(const std::string& path);
std::unique_ptr<DbCursor> open_leveldb_cursor(const std::string& path);
std::unique_ptr<DbWriter> create_leveldb(const std::string& path);

}  // namespace strata::caffe
