#include "layers/data_layer.h"

#include <cstring>

#include "framework/error.h"

namespace strata {

void DataLayer::forward_cpu(const BlobVec& /*bottom*/, const BlobVec& top) {
  std::vector<float*> out;
  out.reserve(top.size());
  for (Blob* t : top) out.push_back(t->data.data<float>());
  next_batch(top, out);
}

void DataLayer::copy_batch(const std::vector<float>& values, const Blob& top, float* out, const char* what) const {
  STRATA_CHECK(static_cast<int64_t>(values.size()) == top.numel(), where(), ": the batch's ", what, " (",
               values.size(), " values) does not fit the top ", shape_str(top.shape()));
  if (!values.empty()) std::memcpy(out, values.data(), values.size() * sizeof(float));
}

}  // namespace strata
