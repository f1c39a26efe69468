// HDF5 files as Caffe's HDF5Data and HDF5Output layers use them: named
// n-dimensional numeric datasets whose axis 0 counts samples, read and
// written as float (HDF5 converts from any stored numeric type).
//
// Built when libhdf5 was found (libhdf5-dev); without it every call is an
// IoError saying so. libhdf5 as Debian builds it is not thread-safe, so
// every call here holds one process-wide lock, and HDF5's own error printing
// is replaced by IoErrors naming the file and the dataset.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/tensor.h"

namespace strata::hdf5 {

bool available();

// The dataset's dims without reading it.
Shape dataset_shape(const std::string& path, const std::string& dataset);
// The whole dataset as floats, C order; `shape` receives its dims.
std::vector<float> read_dataset(const std::string& path, const std::string& dataset, Shape* shape);
// The names of the datasets in the file's root group (for error messages).
std::vector<std::string> dataset_names(const std::string& path);

struct Dataset {
  std::string name;
  Shape shape;
  std::vector<float> data;
};
// Creates (or truncates) `path` with these float datasets.
void write_datasets(const std::string& path, const std::vector<Dataset>& datasets);

// A file whose float datasets grow along axis 0 (HDF5Output): created
// (truncated) at construction, rows appended, closed by the destructor.
class AppendFile {
 public:
  // One dataset per name, each with rows of `row_shapes[i]`.
  AppendFile(const std::string& path, const std::vector<std::string>& names, const std::vector<Shape>& row_shapes);
  ~AppendFile();
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  // Appends `rows` rows to dataset `index` and flushes the file.
  void append(size_t index, const float* data, int64_t rows);
  int64_t rows(size_t index) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::hdf5
