#include "framework/data/hdf5_reader.h"

#include <cctype>
#include <cstring>
#include <sstream>
#include <utility>

#include "framework/caffe/caffe_db.h"
#include "framework/data/hdf5_file.h"
#include "framework/error.h"
#include "framework/io/file_util.h"
#include "framework/rng.h"

namespace strata::hdf5 {

namespace {

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

void shuffle(std::vector<int64_t>& v, uint64_t seed) {
  Rng rng(seed);
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[static_cast<size_t>(rng.uniform_int(i))]);
}

}  // namespace

std::vector<std::string> read_list_file(const std::string& list_path) {
  const std::string text = read_file_bytes(list_path);
  std::vector<std::string> files;
  std::istringstream is(text);
  std::string line;
  while (std::getline(is, line)) {
    size_t a = 0, b = line.size();
    while (a < b && std::isspace(static_cast<unsigned char>(line[a]))) ++a;
    while (b > a && std::isspace(static_cast<unsigned char>(line[b - 1]))) --b;
    line = line.substr(a, b - a);
    if (line.empty() || line[0] == '#') continue;
    files.push_back(caffe::resolve_caffe_path(dirname_of(list_path), line));
  }
  if (files.empty()) {
    fail<ConfigError>("HDF5 list file '", list_path, "' names no files; write one .h5 path per line");
  }
  return files;
}

Reader::Reader(const ReaderOptions& options, std::string where) : options_(options), where_(std::move(where)) {
  STRATA_CHECK(options_.batch_size > 0, "batch_size must be positive");
  STRATA_CHECK(!options_.datasets.empty() && !options_.files.empty(), "datasets and files needed");
  if (options_.shard == ShardMode::kNone) {
    options_.rank = 0;
    options_.world_size = 1;
  }
  int64_t total = 0;
  for (size_t f = 0; f < options_.files.size(); ++f) {
    const std::string& path = options_.files[f];
    int64_t rows = -1;
    for (size_t d = 0; d < options_.datasets.size(); ++d) {
      const std::string& name = options_.datasets[d];
      Shape s;
      try {
        s = dataset_shape(path, name);
      } catch (const IoError& e) {
        fail<IoError>(where_, ": ", e.what());
      }
      if (s.empty()) fail<ShapeError>(where_, ": dataset '", name, "' of '", path, "' is a scalar; rows are axis 0");
      const Shape row(s.begin() + 1, s.end());
      if (f == 0) {
        row_shapes_.push_back(row);
        int64_t n = 1;
        for (int64_t x : row) n *= x;
        row_sizes_.push_back(n);
      } else if (row != row_shapes_[d]) {
        fail<ShapeError>(where_, ": dataset '", name, "' has rows of shape ", shape_str(row), " in '", path, "' but ",
                         shape_str(row_shapes_[d]), " in '", options_.files[0], "'; every file must agree");
      }
      if (rows >= 0 && s[0] != rows) {
        fail<ShapeError>(where_, ": in '", path, "' dataset '", name, "' has ", s[0], " rows but '",
                         options_.datasets[0], "' has ", rows, "; the datasets of a file must have as many rows");
      }
      rows = s[0];
    }
    file_offset_.push_back(total);
    file_rows_.push_back(rows);
    total += rows;
  }
  if (total < options_.world_size || total <= options_.rank) {
    fail<ConfigError>(where_, ": the HDF5 files hold ", total, " rows, too few to give rank ", options_.rank, " of ",
                      options_.world_size, " any; use more data or hdf5_data_param { shard: NONE }");
  }
}

std::vector<int64_t> Reader::file_order(int64_t epoch) const {
  std::vector<int64_t> order(options_.files.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  if (options_.shuffle == ShuffleMode::kOn) {
    shuffle(order, splitmix(splitmix(options_.seed ^ 0x66696c6573ULL) ^ static_cast<uint64_t>(epoch)));
  }
  return order;
}

void Reader::load_file(int64_t epoch, int64_t file) {
  if (epoch == loaded_epoch_ && file == loaded_file_) return;
  const std::string& path = options_.files[static_cast<size_t>(file)];
  if (file != loaded_file_) {
    data_.clear();
    for (size_t d = 0; d < options_.datasets.size(); ++d) {
      Shape s;
      try {
        data_.push_back(read_dataset(path, options_.datasets[d], &s));
      } catch (const IoError& e) {
        fail<IoError>(where_, ": ", e.what());
      }
      if (s.empty() || s[0] != file_rows_[static_cast<size_t>(file)]) {
        fail<IoError>(where_, ": '", path, "' changed while being read (dataset '", options_.datasets[d],
                      "' now has shape ", shape_str(s), ")");
      }
    }
  }
  rows_.clear();
  const int64_t offset = file_offset_[static_cast<size_t>(file)];
  for (int64_t r = 0; r < file_rows_[static_cast<size_t>(file)]; ++r) {
    if ((offset + r) % options_.world_size == options_.rank) rows_.push_back(r);
  }
  if (options_.shuffle == ShuffleMode::kOn) {
    shuffle(rows_, splitmix(splitmix(splitmix(options_.seed) ^ static_cast<uint64_t>(epoch)) ^
                            static_cast<uint64_t>(file)));
  }
  loaded_epoch_ = epoch;
  loaded_file_ = file;
}

void Reader::next(const std::vector<float*>& out) {
  STRATA_CHECK(out.size() == options_.datasets.size(), "one output per dataset");
  const int64_t nfiles = static_cast<int64_t>(options_.files.size());
  std::vector<int64_t> order = file_order(epoch_);
  for (int64_t row = 0; row < options_.batch_size;) {
    const int64_t file = order[static_cast<size_t>(file_pos_)];
    load_file(epoch_, file);
    if (row_pos_ < static_cast<int64_t>(rows_.size())) {
      const int64_t r = rows_[static_cast<size_t>(row_pos_++)];
      for (size_t d = 0; d < out.size(); ++d) {
        const int64_t n = row_sizes_[d];
        std::memcpy(out[d] + row * n, data_[d].data() + r * n, static_cast<size_t>(n) * sizeof(float));
      }
      ++row;
      continue;
    }
    row_pos_ = 0;
    if (++file_pos_ == nfiles) {
      file_pos_ = 0;
      order = file_order(++epoch_);
    }
  }
}

// State text: "strata_hdf5_data 1 rank <r> world_size <w> seed <s> epoch <e> file <f> row <i>"
std::string Reader::save_state() const {
  std::ostringstream os;
  os << "strata_hdf5_data 1 rank " << options_.rank << " world_size " << options_.world_size << " seed "
     << options_.seed << " epoch " << epoch_ << " file " << file_pos_ << " row " << row_pos_ << "\n";
  return os.str();
}

void Reader::load_state(const std::string& state) {
  std::istringstream is(state);
  std::string tag, k[6];
  int version = 0, rank = -1, world = -1;
  uint64_t seed = 0;
  int64_t epoch = -1, file = -1, row = -1;
  if (!(is >> tag >> version >> k[0] >> rank >> k[1] >> world >> k[2] >> seed >> k[3] >> epoch >> k[4] >> file >>
        k[5] >> row) ||
      tag != "strata_hdf5_data" || version != 1 || k[0] != "rank" || k[1] != "world_size" || k[2] != "seed" ||
      k[3] != "epoch" || k[4] != "file" || k[5] != "row" || epoch < 0 || file < 0 ||
      file >= static_cast<int64_t>(options_.files.size()) || row < 0) {
    fail<Error>(where_, ": cannot restore the HDF5 reader from the snapshot: not an HDF5Data state for these files");
  }
  if (rank != options_.rank || world != options_.world_size || seed != options_.seed) {
    fail<Error>(where_, ": cannot restore the HDF5 reader from the snapshot: it was saved by rank ", rank, " of ", world,
                " with seed ", seed, "; resume with the same number of ranks and seed");
  }
  epoch_ = epoch;
  file_pos_ = file;
  row_pos_ = row;
}

}  // namespace strata::hdf5
