#include "layers/hdf5_output.h"

#include <filesystem>

#include "framework/error.h"
#include "framework/io/file_util.h"

namespace strata {

namespace {

const char* const kDatasets[] = {"data", "label"};  // Caffe's HDF5_DATA_DATASET_NAME, HDF5_DATA_LABEL_NAME

}  // namespace

Hdf5OutputLayer::Hdf5OutputLayer(const LayerSpec& spec, const LayerContext& ctx) : Layer(spec, ctx) {
  const std::string name = block("hdf5_output_param").get_string("file_name");
  // Caffe writes relative to the working directory; strata's configs resolve
  // beside the file. The working directory wins when the file's folder is there.
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(name).parent_path();
  const bool from_cwd = name.empty() || name[0] == '/' || parent.empty() || std::filesystem::is_directory(parent, ec);
  file_name_ = from_cwd ? name : join_path(ctx.base_dir, name);
}

LayerSchema Hdf5OutputLayer::schema() {
  LayerSchema s;
  s.kind = LayerKind::kOutput;
  s.blocks = {{"hdf5_output_param", {"file_name"}}};
  s.summary = "Caffe's HDF5Output: appends each batch of its bottoms to the datasets 'data' and 'label' of an HDF5 file";
  return s;
}


void Hdf5OutputLayer::setup(const BlobVec& bottom, const BlobVec& /*top*/) {
  if (!hdf5::available()) {
    fail<IoError>(where_at(), ": strata was built without libhdf5, so HDF5Output cannot write '", file_name_,
                  "'; install libhdf5-dev (apt-get install libhdf5-dev, or tools/install_deps.sh) and rebuild");
  }
  std::vector<std::string> names;
  for (size_t i = 0; i < bottom.size(); ++i) {
    const Shape& s = bottom[i]->shape();
    if (s.empty()) fail<ShapeError>(where_at(), ": bottom ", i, " is a scalar; rows are axis 0");
    row_shapes_.emplace_back(s.begin() + 1, s.end());
    names.push_back(kDatasets[i]);
  }
  if (bottom.size() == 2 && bottom[0]->shape()[0] != bottom[1]->shape()[0]) {
    fail<ShapeError>(where_at(), ": data has ", bottom[0]->shape()[0], " rows but label has ", bottom[1]->shape()[0]);
  }
  try {
    file_ = std::make_unique<hdf5::AppendFile>(file_name_, names, row_shapes_);
  } catch (const IoError& e) {
    fail<IoError>(where_at(), ": ", e.what());
  }
}

void Hdf5OutputLayer::reshape(const BlobVec& bottom, const BlobVec& /*top*/) {
  for (size_t i = 0; i < bottom.size(); ++i) {
    const Shape& s = bottom[i]->shape();
    if (s.empty() || Shape(s.begin() + 1, s.end()) != row_shapes_[i]) {
      fail<ShapeError>(where_at(), ": bottom ", i, " is ", shape_str(s), " but the file's dataset '", kDatasets[i],
                       "' has rows of ", shape_str(row_shapes_[i]), "; the row shape cannot change");
    }
  }
}

void Hdf5OutputLayer::write(const std::vector<const float*>& rows, const BlobVec& bottom) {
  for (size_t i = 0; i < bottom.size(); ++i) file_->append(i, rows[i], bottom[i]->shape()[0]);
}

void Hdf5OutputLayer::forward_cpu(const BlobVec& bottom, const BlobVec& /*top*/) {
  std::vector<const float*> rows;
  for (Blob* b : bottom) rows.push_back(b->data.data<float>());
  write(rows, bottom);
}

void Hdf5OutputLayer::backward_cpu(const BlobVec& /*top*/, const std::vector<bool>& /*propagate_down*/,
                                   const BlobVec& /*bottom*/) {}

#ifdef STRATA_WITH_CUDA
// The bottoms come to the host (a synchronous copy) and are written as on
// the CPU; there is no GPU work to do, so no .cu file.
void Hdf5OutputLayer::forward_cuda(const BlobVec& bottom, const BlobVec& /*top*/) {
  std::vector<Tensor> host;
  std::vector<const float*> rows;
  for (Blob* b : bottom) {
    host.push_back(b->data.to(Device::cpu()));
    rows.push_back(host.back().data<float>());  // device access: host copy
  }
  write(rows, bottom);
}

void Hdf5OutputLayer::backward_cuda(const BlobVec& /*top*/, const std::vector<bool>& /*propagate_down*/,
                                    const BlobVec& /*bottom*/) {}
#endif

STRATA_REGISTER_LAYER("HDF5Output", Hdf5OutputLayer);

}  // namespace strata
