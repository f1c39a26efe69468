// Net: activations stored in a reduced dtype (NetOptions::storage_dtype).
//
// With bf16 or f16 storage, every blob that only layers touch (all but the
// inputs, the outputs, the losses and keep_blobs()) holds its value and its
// gradient in that dtype between calls: half the bytes of f32, in the arena
// of a plan by lifetime as on their own. A layer that computes in f32 alone
// (every layer unless Layer::takes_storage says more) is handed f32 copies
// for each call; a layer that takes the reduced dtype is handed the reduced
// blobs as they are and copies in that dtype of the blobs kept f32, so that
// one call's blobs are all of one dtype. Before the call the Net binds the
// blob's tensor to a copy (converted from the stored dtype when the call
// reads it); after the call it converts what the call wrote back (to the
// nearest even when narrowing) and binds the stored tensor again. The
// copies live for that call's step alone, placed like the call's scratch
// (framework/net_plan.cpp), so the copies of one layer's blobs are all a
// step adds. Which blob tensors a call reads and writes follows the layer's
// declarations: forward reads its bottoms' values and writes its tops';
// backward reads its tops' gradients and the values Layer::backward_reads
// names, and writes the gradients of the bottoms it propagates to. A blob that is a bottom and a top of one layer
// (in place) is read and written through one copy.
#include <algorithm>
#include <sstream>

#include "framework/byte_size.h"
#include "framework/error.h"
#include "framework/net.h"
#include "framework/net_storage.h"

namespace strata {
namespace {

// As the arena's places: where the widest SIMD loads and the GPU libraries want operands.
constexpr size_t kCopyAlignment = 256;

size_t aligned(size_t bytes) { return (bytes + kCopyAlignment - 1) / kCopyAlignment * kCopyAlignment; }

// What a layer's calls see its blobs in: the storage dtype when it takes it, else f32.
DType compute_dtype(const Layer& layer, DType storage) {
  return layer.takes_storage(storage) ? storage : DType::kF32;
}

}  // namespace

std::string StorageReport::str() const {
  if (dtype == DType::kF32) return "";
  std::ostringstream os;
  os << "activations and their gradients stored in " << dtype_name(dtype) << ": " << reduced << " blob(s) ("
     << kept_f32 << " kept f32: inputs, outputs, losses)";
  if (cast_layers) {
    os << "; " << cast_layers << " layer(s) get copies of their blobs in the dtype they compute in (f32, or "
       << dtype_name(dtype) << " for the layers that take it) in " << cast_calls << " call(s) (the largest "
       << format_bytes(cast_bytes) << ")";
  }
  return os.str();
}

void Net::assign_call_dtypes(bool any_reduced) {
  for (auto& l : layers_) {
    l->set_call_dtype(any_reduced ? compute_dtype(*l, options_.storage_dtype) : DType::kF32);
  }
}

void Net::choose_storage() {
  const DType dtype = options_.storage_dtype;
  if (!is_float_dtype(dtype)) {
    fail<ConfigError>("net '", name_, "': activations cannot be stored in ", dtype_name(dtype),
                      "; the storage dtypes are f32, bf16 and f16");
  }
  reduced_.clear();
  storage_report_ = StorageReport{};
  storage_report_.dtype = dtype;
  if (dtype == DType::kF32 && std::all_of(blobs_.begin(), blobs_.end(), [](const auto& kv) {
        return kv.second->data.dtype() == DType::kF32 && kv.second->diff.dtype() == DType::kF32;
      })) {
    assign_call_dtypes(false);
    return;
  }
  std::set<std::string> read;
  for (const auto& names : bottom_names_) read.insert(names.begin(), names.end());
  std::set<const Blob*> losses;
  for (int i = 0; i < num_layers(); ++i) {
    for (size_t t = 0; t < tops_[i].size(); ++t) {
      if (loss_weights_[i][t] != 0.0f) losses.insert(tops_[i][t]);
    }
  }
  for (const std::string& name : blob_names_) {
    Blob* b = blobs_.at(name).get();
    const bool inside = !bottoms_[blob_producer_.at(name)].empty() && read.count(name) && !kept_blobs_.count(name) &&
                        !losses.count(b);
    const bool reduce = dtype != DType::kF32 && inside;
    if (reduce) {
      reduced_.insert(b);
      ++storage_report_.reduced;
    } else {
      ++storage_report_.kept_f32;
    }
    const DType want = reduce ? dtype : DType::kF32;
    for (Tensor* t : {&b->data, &b->diff}) {
      if (t->dtype() != want) *t = Tensor(t->shape(), want, options_.device);
    }
  }
  // Only a net that stores some blob reduced hands its layers copies.
  assign_call_dtypes(!reduced_.empty());
}

std::vector<Net::CastSlot> Net::cast_slots(int i, Call call) const {
  std::vector<CastSlot> slots;
  const Layer& layer = *layers_.at(static_cast<size_t>(i));
  if (reduced_.empty()) return slots;
  // A layer that computes in f32 alone gets f32 copies of the reduced blobs;
  // one that takes the storage dtype gets copies in it of the f32 ones (an
  // input, an output), so that all its blobs are of one dtype.
  const bool native = layer.takes_storage(options_.storage_dtype);
  auto add = [&](Blob* b, bool diff, bool in, bool out) {
    if ((reduced_.count(b) != 0) == native) return;
    for (CastSlot& s : slots) {
      if (s.blob == b && s.diff == diff) {
        s.in = s.in || in;
        s.out = s.out || out;
        return;
      }
    }
    slots.push_back(CastSlot{b, diff, in, out});
  };
  const BlobVec& bottoms = bottoms_[static_cast<size_t>(i)];
  const BlobVec& tops = tops_[static_cast<size_t>(i)];
  if (call != Call::kBackward) {
    for (Blob* b : bottoms) add(b, false, true, false);
    for (Blob* b : tops) add(b, false, false, true);
    return slots;
  }
  const Layer::BackwardReads reads = layer.backward_reads();
  for (Blob* b : tops) {
    add(b, true, true, false);
    if (reads.tops) add(b, false, true, false);
  }
  for (size_t k = 0; k < bottoms.size(); ++k) {
    if (reads.bottoms) add(bottoms[k], false, true, false);
    // A gradient it does not propagate to gets a copy too (written nowhere),
    // so that the layer's pointers are f32 whatever it looks at.
    add(bottoms[k], true, false, bottom_need_backward_[static_cast<size_t>(i)][k]);
  }
  return slots;
}

size_t Net::cast_bytes(int i, Call call) const {
  size_t bytes = 0;
  const size_t element = dtype_size(compute_dtype(*layers_.at(static_cast<size_t>(i)), options_.storage_dtype));
  for (const CastSlot& s : cast_slots(i, call)) {
    const Tensor& t = s.diff ? s.blob->diff : s.blob->data;
    bytes += aligned(static_cast<size_t>(t.numel()) * element);
  }
  return bytes;
}

void Net::plan_casts() {
  const size_t L = layers_.size();
  if (cast_places_.size() != L) cast_places_.assign(L, {});
  if (options_.blob_memory == BlobMemory::kSeparate) {
    // One buffer for every call, the largest call's copies; grown, never shrunk.
    const bool backward = phase() == Phase::kTrain || force_backward_;
    size_t largest = 0;
    for (size_t i = 0; i < L; ++i) {
      const int n = static_cast<int>(i);
      largest = std::max(largest, cast_bytes(n, Call::kForward));
      if (backward) largest = std::max(largest, cast_bytes(n, Call::kBackward));
    }
    if (largest > cast_buffer_.nbytes()) {
      cast_buffer_ = Tensor(Shape{static_cast<int64_t>(largest)}, DType::kU8, options_.device);
    }
    for (size_t i = 0; i < L; ++i) {
      const int n = static_cast<int>(i);
      for (Call call : {Call::kForward, Call::kRecompute, Call::kBackward}) {
        const size_t bytes = call == Call::kBackward && !backward ? 0 : cast_bytes(n, call);
        cast_places_[i][static_cast<size_t>(call)] =
            bytes ? cast_buffer_.view_bytes(0, bytes, {static_cast<int64_t>(bytes)}, DType::kU8) : Tensor();
      }
    }
  } else {
    cast_buffer_ = Tensor();  // the places are the arena's (plan_blob_memory)
  }
  StorageReport& r = storage_report_;
  r.cast_layers = r.cast_calls = 0;
  r.cast_bytes = 0;
  for (const auto& places : cast_places_) {
    int calls = 0;
    for (const Tensor& t : places) {
      if (t.nbytes() == 0) continue;
      ++calls;
      r.cast_bytes = std::max(r.cast_bytes, t.nbytes());
    }
    r.cast_calls += calls;
    r.cast_layers += calls > 0 ? 1 : 0;
  }
}

Net::CastBinding::CastBinding(Net& net, int i, Call call) {
  if (net.reduced_.empty()) return;
  slots_ = net.cast_slots(i, call);
  if (slots_.empty()) return;
  const bool has_place = static_cast<size_t>(i) < net.cast_places_.size();
  const Tensor place = has_place ? net.cast_places_[static_cast<size_t>(i)][static_cast<size_t>(call)] : Tensor();
  const bool checked = net.options_.blob_memory == BlobMemory::kByLifetimeChecked;
  const DType dtype = compute_dtype(*net.layers_[static_cast<size_t>(i)], net.options_.storage_dtype);
  size_t offset = 0;
  stored_.reserve(slots_.size());
  for (const CastSlot& s : slots_) {
    Tensor& t = tensor(s);
    const size_t bytes = static_cast<size_t>(t.numel()) * dtype_size(dtype);
    // A call on shapes larger than the plan's (a reshape outside the net's)
    // takes memory of its own; Net::reshape plans the places again.
    Tensor copy = bytes > 0 && offset + bytes <= place.nbytes() ? place.view_bytes(offset, bytes, t.shape(), dtype)
                                                                : Tensor(t.shape(), dtype, t.device());
    offset += aligned(bytes);
    if (s.in) {
      cast_into(copy, t);
    } else if (checked) {
      copy.fill_bytes(0xff);  // NaN: a read of what the call has not written shows
    }
    stored_.push_back(t);
    t = copy;
  }
}

void Net::CastBinding::finish() {
  for (size_t k = 0; k < stored_.size(); ++k) {
    if (!slots_[k].out) continue;
    const Tensor& written = tensor(slots_[k]);
    Tensor& stored = stored_[k];
    if (stored.shape() != written.shape()) stored.resize(written.shape());
    cast_into(stored, written);
  }
  restore();
}

}  // namespace strata
