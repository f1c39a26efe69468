#include "framework/data/hdf5_file.h"

#include <algorithm>
#include <mutex>

#include "framework/error.h"
#include "framework/io/file_util.h"

#ifdef STRATA_HAVE_HDF5
#include <hdf5.h>
#endif

namespace strata::hdf5 {

#ifdef STRATA_HAVE_HDF5

namespace {

std::mutex& lib_mutex() {
  static std::mutex mu;
  return mu;
}

// Silences HDF5's own error printing once: failures become IoErrors here.
void quiet() {
  static const bool done = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)done;
}

// Closes an HDF5 id when it goes out of scope.
class Id {
 public:
  Id(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Id() {
    if (id_ >= 0) close_(id_);
  }
  Id(Id&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  Id& operator=(Id&&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

Id open_file(const std::string& path) {
  quiet();
  if (!file_exists(path)) fail<IoError>("cannot open HDF5 file '", path, "': it does not exist");
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    fail<IoError>("cannot open HDF5 file '", path, "': it cannot be read or is not an HDF5 file");
  }
  Id f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!f.ok()) fail<IoError>("cannot open HDF5 file '", path, "'");
  return f;
}

// HDF5 1.12 renamed the link iteration's info type; Debian 12 ships 1.10.
#if H5_VERSION_GE(1, 12, 0)
using LinkInfo = H5L_info2_t;
#define STRATA_H5_LITERATE H5Literate2
#else
using LinkInfo = H5L_info_t;
#define STRATA_H5_LITERATE H5Literate
#endif

herr_t collect_name(hid_t /*group*/, const char* name, const LinkInfo* /*info*/, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

std::vector<std::string> names_in(hid_t file) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  STRATA_H5_LITERATE(file, H5_INDEX_NAME, H5_ITER_INC, &idx, &collect_name, &names);
  return names;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "none" : s;
}

Id open_dataset(hid_t file, const std::string& path, const std::string& name) {
  if (H5Lexists(file, name.c_str(), H5P_DEFAULT) <= 0) {
    fail<IoError>("HDF5 file '", path, "' has no dataset '", name, "' (it has: ", join(names_in(file)),
                  "); HDF5Data reads one dataset per top, named as the top");
  }
  Id ds(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) fail<IoError>("HDF5 file '", path, "': '", name, "' is not a dataset");
  Id type(H5Dget_type(ds.get()), H5Tclose);
  const H5T_class_t cls = H5Tget_class(type.get());
  if (cls != H5T_INTEGER && cls != H5T_FLOAT) {
    fail<IoError>("HDF5 file '", path, "': dataset '", name, "' is not numeric; HDF5Data reads integer or float data");
  }
  return ds;
}

Shape shape_of(hid_t ds) {
  Id space(H5Dget_space(ds), H5Sclose);
  const int n = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(static_cast<size_t>(std::max(n, 0)));
  if (n > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return Shape(dims.begin(), dims.end());
}

}  // namespace

bool available() { return true; }

Shape dataset_shape(const std::string& path, const std::string& dataset) {
  std::lock_guard<std::mutex> lock(lib_mutex());
  Id f = open_file(path);
  Id ds = open_dataset(f.get(), path, dataset);
  return shape_of(ds.get());
}

std::vector<float> read_dataset(const std::string& path, const std::string& dataset, Shape* shape) {
  std::lock_guard<std::mutex> lock(lib_mutex());
  Id f = open_file(path);
  Id ds = open_dataset(f.get(), path, dataset);
  *shape = shape_of(ds.get());
  int64_t n = 1;
  for (int64_t d : *shape) n *= d;
  std::vector<float> out(static_cast<size_t>(n));
  if (n > 0 && H5Dread(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0) {
    fail<IoError>("HDF5 file '", path, "': reading dataset '", dataset, "' failed");
  }
  return out;
}

std::vector<std::string> dataset_names(const std::string& path) {
  std::lock_guard<std::mutex> lock(lib_mutex());
  Id f = open_file(path);
  return names_in(f.get());
}

void write_datasets(const std::string& path, const std::vector<Dataset>& datasets) {
  std::lock_guard<std::mutex> lock(lib_mutex());
  quiet();
  Id f(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  if (!f.ok()) fail<IoError>("cannot create HDF5 file '", path, "'");
  for (const Dataset& d : datasets) {
    const std::vector<hsize_t> dims(d.shape.begin(), d.shape.end());
    Id space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
    Id ds(H5Dcreate2(f.get(), d.name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
          H5Dclose);
    if (!ds.ok() || H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, d.data.data()) < 0) {
      fail<IoError>("HDF5 file '", path, "': writing dataset '", d.name, "' failed");
    }
  }
}

struct AppendFile::Impl {
  std::string path;
  hid_t file = -1;
  std::vector<hid_t> datasets;
  std::vector<Shape> rows_shape;
  std::vector<int64_t> rows;
};

AppendFile::AppendFile(const std::string& path, const std::vector<std::string>& names,
                       const std::vector<Shape>& row_shapes)
    : impl_(std::make_unique<Impl>()) {
  std::lock_guard<std::mutex> lock(lib_mutex());
  quiet();
  impl_->path = path;
  impl_->rows_shape = row_shapes;
  impl_->rows.assign(names.size(), 0);
  impl_->file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (impl_->file < 0) fail<IoError>("cannot create HDF5 file '", path, "' (does its folder exist?)");
  for (size_t i = 0; i < names.size(); ++i) {
    std::vector<hsize_t> dims = {0}, maxdims = {H5S_UNLIMITED}, chunk = {0};
    int64_t row = 1;
    for (int64_t d : row_shapes[i]) {
      dims.push_back(static_cast<hsize_t>(d));
      maxdims.push_back(static_cast<hsize_t>(d));
      chunk.push_back(static_cast<hsize_t>(std::max<int64_t>(d, 1)));
      row *= d;
    }
    chunk[0] = static_cast<hsize_t>(std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(row, 1)));
    Id space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), maxdims.data()), H5Sclose);
    Id props(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    H5Pset_chunk(props.get(), static_cast<int>(chunk.size()), chunk.data());
    const hid_t ds = H5Dcreate2(impl_->file, names[i].c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, props.get(),
                                H5P_DEFAULT);
    if (ds < 0) {
      for (hid_t d : impl_->datasets) H5Dclose(d);
      H5Fclose(impl_->file);
      fail<IoError>("HDF5 file '", path, "': cannot create dataset '", names[i], "'");
    }
    impl_->datasets.push_back(ds);
  }
}

AppendFile::~AppendFile() {
  std::lock_guard<std::mutex> lock(lib_mutex());
  for (hid_t d : impl_->datasets) H5Dclose(d);
  if (impl_->file >= 0) H5Fclose(impl_->file);
}

void AppendFile::append(size_t index, const float* data, int64_t rows) {
  std::lock_guard<std::mutex> lock(lib_mutex());
  const hid_t ds = impl_->datasets.at(index);
  std::vector<hsize_t> size = {static_cast<hsize_t>(impl_->rows[index] + rows)};
  std::vector<hsize_t> start = {static_cast<hsize_t>(impl_->rows[index])}, count = {static_cast<hsize_t>(rows)};
  for (int64_t d : impl_->rows_shape[index]) {
    size.push_back(static_cast<hsize_t>(d));
    start.push_back(0);
    count.push_back(static_cast<hsize_t>(d));
  }
  bool ok = H5Dset_extent(ds, size.data()) >= 0;
  Id file_space(H5Dget_space(ds), H5Sclose);
  ok = ok && H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) >= 0;
  Id mem_space(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr), H5Sclose);
  ok = ok && H5Dwrite(ds, H5T_NATIVE_FLOAT, mem_space.get(), file_space.get(), H5P_DEFAULT, data) >= 0;
  ok = ok && H5Fflush(impl_->file, H5F_SCOPE_LOCAL) >= 0;
  if (!ok) fail<IoError>("HDF5 file '", impl_->path, "': appending ", rows, " rows to dataset ", index, " failed");
  impl_->rows[index] += rows;
}

int64_t AppendFile::rows(size_t index) const { return impl_->rows.at(index); }

#else

namespace {
[[noreturn]] void not_built(const std::string& path) {
  fail<IoError>("cannot use HDF5 file '", path, "': strata was built without libhdf5; install libhdf5-dev "
                "(apt-get install libhdf5-dev, or tools/install_deps.sh) and rebuild");
}
}  // namespace

bool available() { return false; }
Shape dataset_shape(const std::string& path, const std::string&) { not_built(path); }
std::vector<float> read_dataset(const std::string& path, const std::string&, Shape*) { not_built(path); }
std::vector<std::string> dataset_names(const std::string& path) { not_built(path); }
void write_datasets(const std::string& path, const std::vector<Dataset>&) { not_built(path); }
struct AppendFile::Impl {};
AppendFile::AppendFile(const std::string& path, const std::vector<std::string>&, const std::vector<Shape>&) {
  not_built(path);
}
AppendFile::~AppendFile() = default;
void AppendFile::append(size_t, const float*, int64_t) {}
int64_t AppendFile::rows(size_t) const { return 0; }

#endif

}  // namespace strata::hdf5
