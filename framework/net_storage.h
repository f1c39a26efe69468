// Net::CastBinding (framework/net_storage.cpp): a layer call's blobs bound
// to f32 copies while they are stored in bf16 or f16. Only for the Net's own
// sources.
#pragma once

#include <vector>

#include "framework/net.h"

namespace strata {

class Net::CastBinding {
 public:
  CastBinding(Net& net, int i, Call call);
  ~CastBinding() { restore(); }
  CastBinding(const CastBinding&) = delete;
  CastBinding& operator=(const CastBinding&) = delete;

  // After the call: what it wrote, converted into the stored tensors (resized
  // when the layer's reshape changed the shape), and those bound again.
  void finish();

 private:
  static Tensor& tensor(const CastSlot& s) { return s.diff ? s.blob->diff : s.blob->data; }
  // The stored tensors bound again (also when the call threw).
  void restore() {
    for (size_t k = 0; k < stored_.size(); ++k) tensor(slots_[k]) = stored_[k];
    stored_.clear();
  }

  std::vector<CastSlot> slots_;
  std::vector<Tensor> stored_;  // per slot: the blob's tensor in the storage dtype
};

}  // namespace strata
