#include "transfer/batch_pipeline.h"

#include <cstring>
#include <vector>

#include "framework/error.h"
#ifdef STRATA_WITH_CUDA
#include "framework/cuda/device_api.h"
#endif

namespace strata {

namespace {

// Host memory for one direction of one slot: page-locked on a GPU.
class HostBuffer {
 public:
  explicit HostBuffer(bool pinned) : pinned_(pinned) {}
  ~HostBuffer() { release(); }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  float* reserve(int64_t floats) {
    const size_t bytes = static_cast<size_t>(floats) * sizeof(float);
    if (bytes > bytes_) {
      release();
#ifdef STRATA_WITH_CUDA
      if (pinned_) {
        data_ = static_cast<float*>(cuda::pinned_alloc(bytes));
        bytes_ = bytes;
        return data_;
      }
#endif
      plain_.resize(static_cast<size_t>(floats));
      data_ = plain_.data();
      bytes_ = bytes;
    }
    return data_;
  }
  float* data() { return data_; }

 private:
  void release() {
#ifdef STRATA_WITH_CUDA
    if (pinned_) cuda::pinned_free(data_);
#endif
    plain_.clear();
    data_ = nullptr;
    bytes_ = 0;
  }

  bool pinned_;
  std::vector<float> plain_;
  float* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace

struct BatchPipeline::Slot {
  explicit Slot(Device device) : in(!device.is_cpu()), out(!device.is_cpu()) {
#ifdef STRATA_WITH_CUDA
    if (!device.is_cpu()) done = std::make_unique<cuda::StreamMark>(device.index);
#endif
  }
  HostBuffer in, out;
  int64_t out_floats = 0;
#ifdef STRATA_WITH_CUDA
  std::unique_ptr<cuda::StreamMark> done;  // after the output's copy (GPU only)
#endif
};

BatchPipeline::BatchPipeline(Device device) : device_(device) {
  for (int k = 0; k < kSlots; ++k) slots_.push_back(std::make_unique<Slot>(device));
}

// The slots' marks wait for copies still in flight into their buffers.
BatchPipeline::~BatchPipeline() = default;

BatchPipeline::Slot& BatchPipeline::slot(int k) { return *slots_[static_cast<size_t>(k)]; }

float* BatchPipeline::input(int64_t floats) {
  STRATA_CHECK(in_flight_ < kSlots, "BatchPipeline: ", kSlots, " batches in flight; finish the oldest first");
  staged_ = true;
  return slot(next_).in.reserve(floats);
}

void BatchPipeline::send_input(Tensor& dst) {
  STRATA_CHECK(staged_, "BatchPipeline::send_input without input()");
  STRATA_CHECK(dst.dtype() == DType::kF32 && dst.device() == device_, "BatchPipeline: the input must be f32 on ",
               device_.str());
  const size_t bytes = static_cast<size_t>(dst.numel()) * sizeof(float);
#ifdef STRATA_WITH_CUDA
  if (!device_.is_cpu()) {
    cuda::copy_to_device_queued(dst.raw_data(), slot(next_).in.data(), bytes, device_.index);
    return;
  }
#endif
  if (bytes) std::memcpy(dst.raw_data(), slot(next_).in.data(), bytes);
}

void BatchPipeline::receive_output(const Tensor& src) {
  STRATA_CHECK(staged_, "BatchPipeline::receive_output without input()");
  STRATA_CHECK(src.dtype() == DType::kF32 && src.device() == device_, "BatchPipeline: the output must be f32 on ",
               device_.str(), ", got ", dtype_name(src.dtype()), " on ", src.device().str());
  Slot& s = slot(next_);
  s.out_floats = src.numel();
  float* host = s.out.reserve(s.out_floats);
  const size_t bytes = static_cast<size_t>(s.out_floats) * sizeof(float);
#ifdef STRATA_WITH_CUDA
  if (!device_.is_cpu()) {
    cuda::copy_to_host_queued(host, src.raw_data(), bytes, device_.index);
    s.done->record();
  } else
#endif
  if (bytes) {
    std::memcpy(host, src.raw_data(), bytes);
  }
  staged_ = false;
  next_ = (next_ + 1) % kSlots;
  ++in_flight_;
}

BatchPipeline::Finished BatchPipeline::finish_oldest() {
  STRATA_CHECK(in_flight_ > 0, "BatchPipeline::finish_oldest with no batch in flight");
  Slot& s = slot(oldest_);
#ifdef STRATA_WITH_CUDA
  if (s.done) s.done->wait();
#endif
  oldest_ = (oldest_ + 1) % kSlots;
  --in_flight_;
  return {s.out.data(), s.out_floats};
}

}  // namespace strata
