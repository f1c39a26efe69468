#include "framework/caffe/caffe_db.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "framework/error.h"
#include "framework/io/file_util.h"

namespace strata::caffe {

DbBackend parse_db_backend(const std::string& text) {
  std::string up = text;
  std::transform(up.begin(), up.end(), up.begin(), [](unsigned char c) { return std::toupper(c); });
  if (up == "LMDB") return DbBackend::kLmdb;
  if (up == "LEVELDB") return DbBackend::kLeveldb;
  fail<ConfigError>("unknown database backend '", text, "'; Caffe's backends are LMDB and LEVELDB");
}

const char* db_backend_name(DbBackend backend) { return backend == DbBackend::kLmdb ? "LMDB" : "LEVELDB"; }

bool db_backend_available(DbBackend backend) {
#ifdef STRATA_HAVE_LMDB
  if (backend == DbBackend::kLmdb) return true;
#endif
#ifdef STRATA_HAVE_LEVELDB
  if (backend == DbBackend::kLeveldb) return true;
#endif
  (void)backend;
  return false;
}

namespace {

[[noreturn]] void not_built(const std::string& path, DbBackend backend) {
  const bool lmdb = backend == DbBackend::kLmdb;
  fail<IoError>("cannot open ", db_backend_name(backend), " database '", path, "': strata was built without ",
                lmdb ? "liblmdb" : "leveldb", "; install ", lmdb ? "liblmdb-dev" : "libleveldb-dev",
                " (apt-get install ", lmdb ? "liblmdb-dev" : "libleveldb-dev",
                ", or tools/install_deps.sh) and rebuild");
}

// What the folder looks like, for an error that names the other backend.
std::string backend_hint(const std::string& path, DbBackend backend) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) return "; the path does not exist";
  if (backend == DbBackend::kLeveldb && fs::exists(fs::path(path) / "data.mdb", ec)) {
    return "; the folder holds data.mdb, an LMDB database: set data_param { backend: LMDB } "
           "(Caffe's default backend is LEVELDB)";
  }
  if (backend == DbBackend::kLmdb && fs::exists(fs::path(path) / "CURRENT", ec)) {
    return "; the folder holds CURRENT, a LevelDB database: set data_param { backend: LEVELDB }";
  }
  return "";
}

}  // namespace

std::string resolve_caffe_path(const std::string& base_dir, const std::string& path) {
  std::error_code ec;
  if (path.empty() || path[0] == '/' || base_dir.empty()) return path;
  if (std::filesystem::exists(path, ec)) return path;
  return join_path(base_dir, path);
}

std::unique_ptr<DbCursor> open_db_cursor(const std::string& path, DbBackend backend) {
  if (!db_backend_available(backend)) not_built(path, backend);
  try {
    return backend == DbBackend::kLmdb ? open_lmdb_cursor(path) : open_leveldb_cursor(path);
  } catch (const IoError& e) {
    fail<IoError>(e.what(), backend_hint(path, backend));
  }
}

std::unique_ptr<DbWriter> create_db(const std::string& path, DbBackend backend) {
  if (!db_backend_available(backend)) not_built(path, backend);
  return backend == DbBackend::kLmdb ? create_lmdb(path) : create_leveldb(path);
}

}  // namespace strata::caffe
