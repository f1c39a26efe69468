// Hdf5Reader: the rows of a list of HDF5 files, as Caffe's HDF5Data layer
// serves them: one dataset per top (named as the top), all with the same
// number of rows in a file; files are read one at a time, in list order.
//
// With shuffle, each epoch visits the files in a new order and each file's
// rows in a new order (Caffe shuffles both). Orders are pure functions of
// (seed, epoch, file), so a restored reader continues exactly. With
// ShardMode::kAuto rank r of w reads the rows whose index over the whole
// list (file after file) is r modulo w. Batches are always full and may
// span files and epochs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/data/data_source.h"  // ShuffleMode, ShardMode
#include "framework/tensor.h"

namespace strata::hdf5 {

// The .h5 paths of a Caffe HDF5 list file: one per line, blank lines and
// '#' lines skipped; each resolved with caffe::resolve_caffe_path against
// the list file's folder. ConfigError when it names none.
std::vector<std::string> read_list_file(const std::string& list_path);

struct ReaderOptions {
  std::vector<std::string> files;
  std::vector<std::string> datasets;
  int64_t batch_size = 1;
  ShuffleMode shuffle = ShuffleMode::kOff;
  uint64_t seed = 1;
  int rank = 0;
  int world_size = 1;
  ShardMode shard = ShardMode::kAuto;
};

class Reader {
 public:
  // Reads every file's dataset shapes (not the data) and checks them.
  Reader(const ReaderOptions& options, std::string where);

  // Per dataset: the shape of one row (the dataset's dims after axis 0).
  const std::vector<Shape>& row_shapes() const { return row_shapes_; }
  int64_t batch_size() const { return options_.batch_size; }

  // Fills batch_size rows of every dataset: out[i] holds batch_size x row
  // values of dataset i.
  void next(const std::vector<float*>& out);

  std::string save_state() const;
  void load_state(const std::string& state);

 private:
  std::vector<int64_t> file_order(int64_t epoch) const;
  void load_file(int64_t epoch, int64_t file);  // the arrays and this rank's row order

  ReaderOptions options_;
  std::string where_;
  std::vector<Shape> row_shapes_;
  std::vector<int64_t> row_sizes_;     // values per row, per dataset
  std::vector<int64_t> file_rows_;     // rows per file
  std::vector<int64_t> file_offset_;   // global index of each file's first row

  // Position: epoch, index into its file order, index into the file's rows.
  int64_t epoch_ = 0, file_pos_ = 0, row_pos_ = 0;

  // The file loaded now.
  int64_t loaded_epoch_ = -1, loaded_file_ = -1;
  std::vector<std::vector<float>> data_;  // per dataset
  std::vector<int64_t> rows_;             // this rank's rows of the file, in reading order
};

}  // namespace strata::hdf5
