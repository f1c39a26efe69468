// What the host-side framework (Tensor, Net, Solver, tools) needs from the
// CUDA runtime, without CUDA headers: device memory from the caching
// allocator, copies between host and device, and the memory report. The
// definitions exist only in a build with CUDA (STRATA_WITH_CUDA); callers
// guard their use with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "framework/cuda/allocator.h"
#include "framework/dtype.h"

namespace strata::cuda {

int device_count();  // 0 when no GPU or no driver; never throws (also in runtime.h)
// ConfigError naming the device and the devices there are, when `index` is not one.
void check_device_index(int index);

// Zeroed device memory of at least `bytes` on device `index`, from its
// caching allocator (the zeroing is queued on the compute stream).
void* device_malloc(size_t bytes, int index);
// Returns a block to the cache; never throws (called from destructors).
void device_free(void* ptr, int index) noexcept;

// Copies `bytes` between any two places (host or any device), ordered after
// the work queued on the compute stream of the device(s) involved. Returns
// when the destination may be read: device-to-host and host-to-device copies
// wait for the copy; device-to-device copies are only queued.
// Device index -1 means host memory.
void copy_bytes(void* dst, int dst_device, const void* src, int src_device, size_t bytes);
// `rows` rows of `row_bytes` each, row r from src + r * src_pitch to
// dst + r * dst_pitch, in one 2-D copy (cudaMemcpy2DAsync), with
// copy_bytes' places and ordering: what cuts a block of channels out of a
// tensor, or puts one back, without a copy per image (tensor parallelism).
void copy_rows(void* dst, int dst_device, size_t dst_pitch, const void* src, int src_device, size_t src_pitch,
               size_t row_bytes, size_t rows);
// Copies that overlap compute (`strata embed` keeps a batch in flight):
// page-locked host memory, and a copy between it and device `index` queued
// on that device's compute stream without waiting. The host may touch
// `host` again only after a StreamMark recorded after the copy has passed.
void* pinned_alloc(size_t bytes);
void pinned_free(void* ptr) noexcept;
void copy_to_device_queued(void* dst, const void* host, size_t bytes, int index);
void copy_to_host_queued(void* host, const void* src, size_t bytes, int index);
// A point in the compute stream of device `index`: record() marks what is
// queued so far; wait() blocks the host until the device has passed it.
class StreamMark {
 public:
  explicit StreamMark(int index);
  ~StreamMark();  // never throws
  StreamMark(const StreamMark&) = delete;
  StreamMark& operator=(const StreamMark&) = delete;
  void record();
  void wait();

 private:
  int index_;
  void* event_ = nullptr;  // cudaEvent_t
};

// Queued on the compute stream of `index`.
void zero_bytes(void* ptr, size_t bytes, int index);
void fill_f32(float* ptr, int64_t n, float value, int index);
// Every byte of [ptr, ptr + bytes) set to `byte`; queued likewise.
void set_bytes(void* ptr, uint8_t byte, size_t bytes, int index);
// n elements at `src` (f32, f16 or bf16) converted to `to` (likewise) at
// `dst`, both on device `index`; queued on its compute stream
// (framework/cuda/cast.cu, rounding as framework/dtype.h does).
void cast_elements(void* dst, DType to, const void* src, DType from, int64_t n, int index);
// `images` images of `channels` x `spatial` elements at `src` (f32, f16 or
// bf16) written to `dst` (likewise) in the other layout: NCHW [C][spatial]
// to NHWC [spatial][C] per image when `to_nhwc`, else back; converted as
// cast_elements does, or added into an f32 `dst` with `accumulate`. Both on
// device `index`, queued on its compute stream (framework/cuda/layout.cu).
void convert_layout(void* dst, DType to, const void* src, DType from, int64_t images, int64_t channels,
                    int64_t spatial, bool to_nhwc, bool accumulate, int index);
// y[0..n) += alpha * x[0..n), device pointers on `index`; queued on its compute stream.
void axpy_f32(int64_t n, float alpha, const float* x, float* y, int index);
// Reads n device floats (each at its own address) into out[0..n) with one
// synchronisation: what the Net does with its loss values once per step.
void read_scalars(const std::vector<const float*>& device_ptrs, float* out, int index);
// A loss top read one step later (framework/solver/step_ledger.h): its value
// added into a device sum, *sum += double(weight) * *x, and its gradient
// filled with weight * float(*scale), the loss scale the device keeps.
// Queued on the compute stream of `index`; nothing is read back.
void add_weighted_loss(double* sum, const float* x, float weight, int index);
void fill_f32_scaled(float* ptr, int64_t n, float weight, const double* scale, int index);
// A step's record reduced over data-parallel ranks, on the device: out[0] =
// float(*loss) * share, out[1] = stop; and back, *loss = in[0], *stop = in[1].
void pack_step_results(float* out, const double* loss, float share, float stop, int index);
void unpack_step_results(double* loss, double* stop, const float* in, int index);
// Waits for all work on every stream of `index`.
void synchronize(int index);

// Caching-allocator statistics and control for device `index`.
AllocatorStats memory_stats(int index);
void reset_peak_memory_stats(int index);
void empty_cache(int index);
// Gives the shared workspace (runtime.h) back to the cache; the next caller
// of workspace() takes a new one. Only between passes, when no layer holds
// the pointer: a benchmark between models, so one model's workspace is not
// counted in the next one's peak.
void release_workspace(int index);
// "cuda:0 (NVIDIA H100): allocated ... reserved ...; device 79.10 GiB total, 78.00 GiB free".
std::string memory_report(int index);

// Step graphs (framework/solver/step_graph.h): work queued on the compute
// stream of `index` captured into a CUDA graph and replayed. While a capture
// is open, the caching allocator serves it from a private pool (allocator.h)
// that the graph keeps until it is destroyed.
struct CapturedGraph;
// Opens the capture (cudaStreamCaptureModeThreadLocal: a call of this thread
// that would wait for the device fails instead).
void begin_capture(int index);
// Closes it and instantiates the graph; throws with CUDA's reason when the
// capture failed (the pool is released then).
CapturedGraph* end_capture(int index);
// Closes a capture whose work threw, discarding it; never throws.
void abandon_capture(int index) noexcept;
void launch_graph(CapturedGraph* graph);
// Waits for its last launch, destroys it and releases its pool.
void destroy_graph(CapturedGraph* graph) noexcept;

}  // namespace strata::cuda
