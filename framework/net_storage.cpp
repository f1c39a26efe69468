// Net: activations stored in a reduced dtype (NetOptions::storage_dtype).
//
// With bf16 or f16 storage, every blob that only layers touch (all but the
// inputs, the outputs, the losses and keep_blobs()) holds its value and its
// gradient in that dtype between calls: half the bytes of f32, in the arena
// of a plan by lifetime as on their own. Labels stay f32: a blob a layer
// declares f32 (Layer::bottom_stays_f32, top_stays_f32), and the bottoms of
// a layer whose every read top stays f32 for its readers (a Split of the
// labels). A layer that computes in f32 alone (every layer unless
// Layer::takes_storage says more) is handed f32 copies for each call; a
// layer that takes the reduced dtype is handed the reduced blobs as they
// are and copies in that dtype of the blobs kept f32 (but those it declares
// f32), so that one call's blobs are all of one dtype. A layer none of whose
// blobs is reduced is called in f32. Before the call the Net binds the
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
//
// Layouts go the same way (NetOptions::channels_last, framework/layout.h):
// blobs_channels_last picks the blobs stored NHWC, each layer is called in
// NHWC when it takes it and touches one of them, and a call gets copies in
// its layout of the blobs stored in the other, converted with the dtype in
// one pass (convert_layout_into).
#include <algorithm>
#include <map>
#include <sstream>

#include "framework/byte_size.h"
#include "framework/error.h"
#include "framework/layout.h"
#include "framework/net.h"
#include "framework/net_storage.h"

namespace strata {
namespace {

// As the arena's places: where the widest SIMD loads and the GPU libraries want operands.
constexpr size_t kCopyAlignment = 256;

size_t aligned(size_t bytes) { return (bytes + kCopyAlignment - 1) / kCopyAlignment * kCopyAlignment; }

}  // namespace

std::string StorageReport::str() const {
  if (dtype == DType::kF32 && channels_last == 0) return "";
  std::ostringstream os;
  if (dtype != DType::kF32) {
    os << "activations and their gradients stored in " << dtype_name(dtype) << ": " << reduced << " blob(s) ("
       << kept_f32 << " kept f32: inputs, outputs, losses, labels)";
  }
  if (channels_last) {
    os << (dtype != DType::kF32 ? "; " : "") << channels_last << " blob(s) stored channels-last (NHWC), "
       << layout_layers << " layer(s) at their borders converting";
  }
  if (cast_layers) {
    os << "; " << cast_layers << " layer(s) get copies of their blobs in the dtype";
    if (channels_last) os << " and layout";
    os << " they compute in";
    if (dtype != DType::kF32) os << " (f32, or " << dtype_name(dtype) << " for the layers that take it)";
    os << (dtype != DType::kF32 ? " in " : ", in ") << cast_calls << " call(s) (the largest "
       << format_bytes(cast_bytes) << ")";
  }
  return os.str();
}

void Net::assign_call_dtypes(const std::set<const Blob*>& reduced) {
  const DType storage = options_.storage_dtype;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = *layers_[i];
    bool touches_reduced = false;
    for (size_t k = 0; k < bottoms_[i].size(); ++k) {
      touches_reduced |= !l.bottom_stays_f32(static_cast<int>(k)) && reduced.count(bottoms_[i][k]);
    }
    for (size_t t = 0; t < tops_[i].size(); ++t) {
      touches_reduced |= !l.top_stays_f32(static_cast<int>(t)) && reduced.count(tops_[i][t]);
    }
    layers_[i]->set_call_dtype(touches_reduced && l.takes_storage(storage) ? storage : DType::kF32);
  }
}

bool Net::touched_by_layers_alone(const std::string& name, const std::set<std::string>& read) const {
  return !bottoms_[static_cast<size_t>(blob_producer_.at(name))].empty() && read.count(name) &&
         !kept_blobs_.count(name);
}

std::set<const Blob*> Net::blobs_to_reduce() const {
  std::set<const Blob*> reduce;
  if (options_.storage_dtype == DType::kF32) return reduce;
  std::set<std::string> read;
  for (const auto& names : bottom_names_) read.insert(names.begin(), names.end());
  // Blobs that stay f32: the losses, what a layer declares (a label, a loss,
  // an accuracy), and on the way to a declared bottom the bottoms of a layer
  // whose every top that is read stays f32 for its readers (a Split or a
  // Reshape of the labels). Readers come after writers: one pass from the end.
  std::set<const Blob*> f32;
  std::set<const Blob*> f32_for_readers;
  for (int i = num_layers() - 1; i >= 0; --i) {
    const size_t u = static_cast<size_t>(i);
    const Layer& l = *layers_[u];
    bool tops_read = false, every_read_top_f32 = true;
    for (size_t t = 0; t < tops_[u].size(); ++t) {
      const Blob* top = tops_[u][t];
      if (loss_weights_[u][t] != 0.0f || l.top_stays_f32(static_cast<int>(t))) f32.insert(top);
      if (!read.count(top_names_[u][t])) continue;
      tops_read = true;
      every_read_top_f32 = every_read_top_f32 && f32_for_readers.count(top);
    }
    for (size_t k = 0; k < bottoms_[u].size(); ++k) {
      if (l.bottom_stays_f32(static_cast<int>(k)) || (tops_read && every_read_top_f32)) {
        f32_for_readers.insert(bottoms_[u][k]);
      }
    }
  }
  for (const std::string& name : blob_names_) {
    const Blob* b = blobs_.at(name).get();
    if (touched_by_layers_alone(name, read) && !f32.count(b) && !f32_for_readers.count(b)) reduce.insert(b);
  }
  return reduce;
}

std::set<const Blob*> Net::blobs_channels_last() const {
  std::set<const Blob*> nhwc;
  if (!options_.channels_last) return nhwc;
  // Candidates: read and written by layers alone (as a reduced dtype's
  // blobs), by layers that all take NHWC.
  const size_t L = layers_.size();
  std::map<const Blob*, std::vector<size_t>> touching;  // producer and readers
  for (size_t i = 0; i < L; ++i) {
    for (const Blob* b : bottoms_[i]) touching[b].push_back(i);
    for (const Blob* t : tops_[i]) touching[t].push_back(i);
  }
  std::set<std::string> read;
  for (const auto& names : bottom_names_) read.insert(names.begin(), names.end());
  std::set<const Blob*> candidates;
  for (const std::string& name : blob_names_) {
    const Blob* b = blobs_.at(name).get();
    const size_t producer = static_cast<size_t>(blob_producer_.at(name));
    if (!touched_by_layers_alone(name, read)) continue;
    bool loss = false;
    for (size_t t = 0; t < tops_[producer].size(); ++t) loss |= tops_[producer][t] == b && loss_weights_[producer][t] != 0.0f;
    if (loss) continue;
    bool all_take = true;
    for (size_t i : touching[b]) all_take = all_take && layers_[i]->channels_last() != ChannelsLast::kNo;
    if (all_take) candidates.insert(b);
  }
  // Grown from the layers that run faster in NHWC, through candidates.
  std::vector<size_t> todo;
  std::vector<char> seen(L, 0);
  for (size_t i = 0; i < L; ++i) {
    if (layers_[i]->channels_last() == ChannelsLast::kFaster) {
      todo.push_back(i);
      seen[i] = 1;
    }
  }
  while (!todo.empty()) {
    const size_t i = todo.back();
    todo.pop_back();
    std::vector<const Blob*> mine(bottoms_[i].begin(), bottoms_[i].end());
    mine.insert(mine.end(), tops_[i].begin(), tops_[i].end());
    for (const Blob* b : mine) {
      if (!candidates.count(b) || !nhwc.insert(b).second) continue;
      for (size_t j : touching[b]) {
        if (!seen[j]) {
          seen[j] = 1;
          todo.push_back(j);
        }
      }
    }
  }
  return nhwc;
}

std::vector<int> Net::assign_call_layouts(const std::set<const Blob*>& nhwc) {
  std::vector<int> changed;
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& l = *layers_[i];
    bool touches = false;
    for (const Blob* b : bottoms_[i]) touches |= nhwc.count(b) != 0;
    for (const Blob* t : tops_[i]) touches |= nhwc.count(t) != 0;
    const Layout want = touches && l.channels_last() != ChannelsLast::kNo ? Layout::kNHWC : Layout::kNCHW;
    if (want != l.call_layout()) changed.push_back(static_cast<int>(i));
    l.set_call_layout(want);
  }
  return changed;
}

void Net::choose_storage() {
  // The layouts first: a layer whose layout changed (a kept blob) prepares
  // for it again, so that the sizes the plan reads follow.
  channels_last_ = blobs_channels_last();
  for (int i : assign_call_layouts(channels_last_)) {
    layers_[static_cast<size_t>(i)]->reshape(bottoms_[static_cast<size_t>(i)], tops_[static_cast<size_t>(i)]);
  }
  const DType dtype = options_.storage_dtype;
  if (!is_float_dtype(dtype)) {
    fail<ConfigError>("net '", name_, "': activations cannot be stored in ", dtype_name(dtype),
                      "; the storage dtypes are f32, bf16 and f16");
  }
  storage_report_ = StorageReport{};
  storage_report_.dtype = dtype;
  storage_report_.channels_last = static_cast<int>(channels_last_.size());
  for (size_t i = 0; i < layers_.size(); ++i) {
    bool border = false;
    for (const BlobVec* blobs : {&bottoms_[i], &tops_[i]}) {
      for (const Blob* b : *blobs) border |= layout_of(*b) != layers_[i]->call_layout() && b->shape().size() > 2;
    }
    storage_report_.layout_layers += border ? 1 : 0;
  }
  reduced_ = blobs_to_reduce();
  if (reduced_.empty() && std::all_of(blobs_.begin(), blobs_.end(), [](const auto& kv) {
        return kv.second->data.dtype() == DType::kF32 && kv.second->diff.dtype() == DType::kF32;
      })) {
    assign_call_dtypes(reduced_);
    if (dtype != DType::kF32) storage_report_.kept_f32 = static_cast<int>(blob_names_.size());
    return;
  }
  for (const std::string& name : blob_names_) {
    Blob* b = blobs_.at(name).get();
    const bool reduce = reduced_.count(b) != 0;
    ++(reduce ? storage_report_.reduced : storage_report_.kept_f32);
    const DType want = reduce ? dtype : DType::kF32;
    for (Tensor* t : {&b->data, &b->diff}) {
      if (t->dtype() != want) *t = Tensor(t->shape(), want, options_.device);
    }
  }
  assign_call_dtypes(reduced_);
}

std::vector<Net::CastSlot> Net::cast_slots(int i, Call call) const {
  std::vector<CastSlot> slots;
  const Layer& layer = *layers_.at(static_cast<size_t>(i));
  if (!has_casts()) return slots;
  // A layer called in f32 gets f32 copies of the reduced blobs; one called
  // in the storage dtype gets copies in it of the f32 ones (an input, an
  // output), so that all its blobs are of one dtype, but for those it
  // declares f32 (labels, a loss), which it gets as they are.
  // Likewise a layer called in NHWC gets NHWC copies of its NCHW blobs, and
  // one called in NCHW NCHW copies of its NHWC blobs (with the dtype's cast
  // where both differ).
  const DType call_dtype = layer.call_dtype();
  const Layout call_layout = layer.call_layout();
  auto add = [&](Blob* b, bool stays_f32, bool diff, bool in, bool out) {
    const DType dtype = stays_f32 ? DType::kF32 : call_dtype;
    const Layout stored = layout_of(*b);
    // Labels and losses (f32 by declaration) and blobs of rank 2 or less are
    // the same in both layouts.
    const Layout layout = stays_f32 || b->shape().size() <= 2 ? stored : call_layout;
    if (storage_dtype_of(*b) == dtype && stored == layout) return;
    for (CastSlot& s : slots) {
      if (s.blob == b && s.diff == diff) {
        s.in = s.in || in;
        s.out = s.out || out;
        return;
      }
    }
    slots.push_back(CastSlot{b, dtype, layout, stored, diff, in, out});
  };
  const BlobVec& bottoms = bottoms_[static_cast<size_t>(i)];
  const BlobVec& tops = tops_[static_cast<size_t>(i)];
  auto bottom_f32 = [&](size_t k) { return layer.bottom_stays_f32(static_cast<int>(k)); };
  auto top_f32 = [&](size_t t) { return layer.top_stays_f32(static_cast<int>(t)); };
  if (call != Call::kBackward) {
    for (size_t k = 0; k < bottoms.size(); ++k) add(bottoms[k], bottom_f32(k), false, true, false);
    for (size_t t = 0; t < tops.size(); ++t) add(tops[t], top_f32(t), false, false, true);
    return slots;
  }
  const Layer::BackwardReads reads = layer.backward_reads();
  for (size_t t = 0; t < tops.size(); ++t) {
    add(tops[t], top_f32(t), true, true, false);
    if (reads.tops) add(tops[t], top_f32(t), false, true, false);
  }
  for (size_t k = 0; k < bottoms.size(); ++k) {
    if (reads.bottoms) add(bottoms[k], bottom_f32(k), false, true, false);
    // A gradient it does not propagate to gets a copy too (written nowhere),
    // so that the layer's pointers are of its call dtype whatever it looks at.
    add(bottoms[k], bottom_f32(k), true, false, bottom_need_backward_[static_cast<size_t>(i)][k]);
  }
  return slots;
}

size_t Net::cast_bytes(int i, Call call) const {
  size_t bytes = 0;
  for (const CastSlot& s : cast_slots(i, call)) {
    const Tensor& t = s.diff ? s.blob->diff : s.blob->data;
    bytes += aligned(static_cast<size_t>(t.numel()) * dtype_size(s.dtype));
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
  if (!net.has_casts()) return;
  slots_ = net.cast_slots(i, call);
  if (slots_.empty()) return;
  const bool has_place = static_cast<size_t>(i) < net.cast_places_.size();
  const Tensor place = has_place ? net.cast_places_[static_cast<size_t>(i)][static_cast<size_t>(call)] : Tensor();
  const bool checked = net.options_.blob_memory == BlobMemory::kByLifetimeChecked;
  size_t offset = 0;
  stored_.reserve(slots_.size());
  for (const CastSlot& s : slots_) {
    Tensor& t = tensor(s);
    const DType dtype = s.dtype;
    const size_t bytes = static_cast<size_t>(t.numel()) * dtype_size(dtype);
    // A call on shapes larger than the plan's (a reshape outside the net's)
    // takes memory of its own; Net::reshape plans the places again.
    Tensor copy = bytes > 0 && offset + bytes <= place.nbytes() ? place.view_bytes(offset, bytes, t.shape(), dtype)
                                                                : Tensor(t.shape(), dtype, t.device());
    offset += aligned(bytes);
    if (s.in) {
      convert_layout_into(copy, s.layout, t, s.stored);
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
    convert_layout_into(stored, slots_[k].stored, written, slots_[k].layout);
  }
  restore();
}

}  // namespace strata
