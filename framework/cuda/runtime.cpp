// Per-device runtime state: streams, library handles, the caching allocator
// and the workspace. Created on first use of a device and kept for the life
// of the process (destroying CUDA objects during static destruction races
// the driver's own shutdown).
#ifdef STRATA_WITH_CUDA

#include "framework/cuda/runtime.h"

#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "framework/byte_size.h"
#include "framework/cuda/allocator.h"
#include "framework/cuda/device_api.h"
#include "framework/cuda/math.h"
#include "framework/cuda/streams.h"
#include "framework/error.h"

namespace strata::cuda {

void throw_library_error(const char* library, const char* expr, const char* file, int line,
                         const std::string& detail) {
  std::ostringstream os;
  os << library << " call failed: " << expr << " at " << file << ":" << line << ": " << detail;
  throw Error(os.str());
}

const char* cublas_status_string(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "unknown cuBLAS status";
  }
}

namespace {

// Stream ids the allocator's record_use() knows.
enum StreamId : int { kCopyStream = 1, kCommStream = 2 };

struct DeviceContext {
  int index = 0;
  cudaStream_t compute = nullptr, copy = nullptr, comm = nullptr;
  cublasHandle_t cublas = nullptr;
  void* cublas_workspace = nullptr;  // cuBLAS's own, for the process (never freed, as the context)
  cublasLtHandle_t cublaslt = nullptr;
  cudnnHandle_t cudnn = nullptr;
  std::unique_ptr<BlockCache> cache;
  std::mutex events_mu;
  std::unordered_map<void*, std::vector<cudaEvent_t>> retired;  // block -> events still to complete
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::mutex mu;  // handles and workspace
};

cudaStream_t stream_of(DeviceContext& ctx, int id) {
  return id == kCopyStream ? ctx.copy : id == kCommStream ? ctx.comm : ctx.compute;
}

std::unique_ptr<DeviceContext> make_context(int index) {
  auto ctx = std::make_unique<DeviceContext>();
  ctx->index = index;
  DeviceGuard guard(index);
  // Non-blocking: no implicit synchronisation with the legacy default stream,
  // which strata never uses (every copy names one of these streams).
  STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx->compute, cudaStreamNonBlocking));
  STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx->copy, cudaStreamNonBlocking));
  STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx->comm, cudaStreamNonBlocking));
  DeviceContext* raw = ctx.get();
  BlockCache::Backend backend;
  backend.malloc = [index](size_t bytes) -> void* {
    DeviceGuard g(index);
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear the sticky-free error so later checks pass
      return nullptr;
    }
    STRATA_CUDA_CHECK(err);
    return p;
  };
  backend.free = [index, raw](void* p) {
    DeviceGuard g(index);
    // cudaFree waits for the device; the memory may still be read by queued work otherwise.
    cudaFree(p);
    std::lock_guard<std::mutex> lock(raw->events_mu);
    raw->retired.erase(p);
  };
  backend.retire = [index, raw](void* p, const std::vector<int>& streams) {
    DeviceGuard g(index);
    std::lock_guard<std::mutex> lock(raw->events_mu);
    std::vector<cudaEvent_t>& evs = raw->retired[p];
    for (int s : streams) {
      cudaEvent_t ev = nullptr;
      STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
      STRATA_CUDA_CHECK(cudaEventRecord(ev, stream_of(*raw, s)));
      evs.push_back(ev);
    }
  };
  backend.pending = [raw](void* p) {
    std::lock_guard<std::mutex> lock(raw->events_mu);
    auto it = raw->retired.find(p);
    if (it == raw->retired.end()) return false;
    std::vector<cudaEvent_t>& evs = it->second;
    while (!evs.empty()) {
      const cudaError_t q = cudaEventQuery(evs.back());
      if (q == cudaErrorNotReady) return true;
      STRATA_CUDA_CHECK(q);
      cudaEventDestroy(evs.back());
      evs.pop_back();
    }
    raw->retired.erase(it);
    return false;
  };
  ctx->cache = std::make_unique<BlockCache>(std::move(backend));
  return ctx;
}

std::mutex g_contexts_mu;
std::vector<DeviceContext*> g_contexts;  // by device index; never freed (see above)

DeviceContext& context(int index) {
  std::lock_guard<std::mutex> lock(g_contexts_mu);
  if (index < 0) fail<Error>("bad CUDA device index ", index);
  if (static_cast<size_t>(index) >= g_contexts.size()) g_contexts.resize(index + 1, nullptr);
  if (!g_contexts[index]) {
    check_device_index(index);
    g_contexts[index] = make_context(index).release();
  }
  return *g_contexts[index];
}

DeviceContext& current() { return context(current_device()); }

}  // namespace

int current_device() {
  int d = 0;
  STRATA_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void set_device(int index) {
  check_device_index(index);
  STRATA_CUDA_CHECK(cudaSetDevice(index));
}

DeviceGuard::DeviceGuard(int index) {
  STRATA_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != index) STRATA_CUDA_CHECK(cudaSetDevice(index));
  switched_ = previous_ != index;
}

DeviceGuard::~DeviceGuard() {
  if (!switched_) return;
  try {
    STRATA_CUDA_CHECK(cudaSetDevice(previous_));
  } catch (const Error&) {
    // Not rethrown (destructors must not throw); cudaGetLastError() still holds it.
  }
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver / no device: clear and report none
    return 0;
  }
  return n;
}

void check_device_index(int index) {
  const int n = device_count();
  if (index < 0 || index >= n) {
    if (n == 0) {
      fail<ConfigError>("device cuda:", index, " requested, but no CUDA device is available here "
                        "(no GPU, or no driver); use --device cpu");
    }
    fail<ConfigError>("device cuda:", index, " does not exist: this machine has ", n,
                      " CUDA device(s), cuda:0 to cuda:", n - 1);
  }
}

cudaStream_t compute_stream() { return current().compute; }

bool capturing() {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  STRATA_CUDA_CHECK(cudaStreamIsCapturing(current().compute, &status));
  return status != cudaStreamCaptureStatusNone;
}
cudaStream_t copy_stream() { return current().copy; }
cudaStream_t comm_stream() { return current().comm; }

cublasHandle_t cublas_handle() {
  DeviceContext& ctx = current();
  std::lock_guard<std::mutex> lock(ctx.mu);
  if (!ctx.cublas) {
    STRATA_CUBLAS_CHECK(cublasCreate(&ctx.cublas));
    STRATA_CUBLAS_CHECK(cublasSetStream(ctx.cublas, ctx.compute));
    // A workspace of its own, set once: cuBLAS would otherwise take one from
    // the driver when it first needs it, which a step graph's capture must
    // not do. 32 MiB is what cuBLAS's guide asks for on Hopper (after
    // cublasSetStream, which resets it).
    constexpr size_t kCublasWorkspace = size_t(32) << 20;
    ctx.cublas_workspace = device_malloc(kCublasWorkspace, ctx.index);
    STRATA_CUBLAS_CHECK(cublasSetWorkspace(ctx.cublas, ctx.cublas_workspace, kCublasWorkspace));
  }
  return ctx.cublas;
}

cublasLtHandle_t cublaslt_handle() {
  DeviceContext& ctx = current();
  std::lock_guard<std::mutex> lock(ctx.mu);
  if (!ctx.cublaslt) STRATA_CUBLAS_CHECK(cublasLtCreate(&ctx.cublaslt));
  return ctx.cublaslt;
}

cudnnHandle_t cudnn_handle() {
  DeviceContext& ctx = current();
  std::lock_guard<std::mutex> lock(ctx.mu);
  if (!ctx.cudnn) {
    STRATA_CUDNN_CHECK(cudnnCreate(&ctx.cudnn));
    STRATA_CUDNN_CHECK(cudnnSetStream(ctx.cudnn, ctx.compute));
  }
  return ctx.cudnn;
}

void* workspace(size_t bytes) {
  DeviceContext& ctx = current();
  std::lock_guard<std::mutex> lock(ctx.mu);
  if (bytes > ctx.workspace_bytes) {
    // Stream-ordered: work already queued with the old workspace runs before
    // anything that gets the block again.
    if (ctx.workspace) ctx.cache->free(ctx.workspace);
    ctx.workspace = nullptr;
    ctx.workspace_bytes = 0;
    ctx.workspace = device_malloc(bytes, ctx.index);
    ctx.workspace_bytes = round_allocation(bytes);
  }
  return ctx.workspace;
}

// ---- device_api.h ----

void* device_malloc(size_t bytes, int index) {
  if (bytes == 0) return nullptr;
  DeviceContext& ctx = context(index);
  void* p = ctx.cache->allocate(bytes, [&](size_t want, const AllocatorStats& st) {
    size_t free_b = 0, total_b = 0;
    {
      DeviceGuard g(index);
      cudaMemGetInfo(&free_b, &total_b);
    }
    fail<Error>("CUDA out of memory on cuda:", index, ": could not allocate ", want, " bytes (", st.str(),
                "; device ", format_bytes(free_b), " free of ", format_bytes(total_b),
                "); use a smaller batch size or a smaller model");
  });
  DeviceGuard g(index);
  // Zeroed like CPU storage; queued, so it is ordered before any use on the compute stream.
  STRATA_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, ctx.compute));
  return p;
}

void device_free(void* ptr, int index) noexcept {
  if (!ptr) return;
  try {
    context(index).cache->free(ptr);
  } catch (...) {
    // Destructors must not throw; a failure here means the context is gone.
  }
}

void copy_bytes(void* dst, int dst_device, const void* src, int src_device, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  if (dst_device < 0 && src_device < 0) {
    std::memcpy(dst, src, bytes);
    return;
  }
  if (dst_device >= 0 && src_device >= 0) {
    DeviceContext& d = context(dst_device);
    if (dst_device != src_device) {
      // The source's pending writes first, then a peer copy on the destination's stream.
      DeviceContext& s = context(src_device);
      { DeviceGuard g(src_device); STRATA_CUDA_CHECK(cudaStreamSynchronize(s.compute)); }
      DeviceGuard g(dst_device);
      STRATA_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, bytes, d.compute));
      return;
    }
    DeviceGuard g(dst_device);
    STRATA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, d.compute));
    return;
  }
  const int dev = dst_device >= 0 ? dst_device : src_device;
  DeviceContext& ctx = context(dev);
  DeviceGuard g(dev);
  const cudaMemcpyKind kind = dst_device >= 0 ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
  STRATA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, ctx.compute));
  // The host reads dst (D2H) or may overwrite src (H2D) right after we return.
  STRATA_CUDA_CHECK(cudaStreamSynchronize(ctx.compute));
}

void copy_rows(void* dst, int dst_device, size_t dst_pitch, const void* src, int src_device, size_t src_pitch,
               size_t row_bytes, size_t rows) {
  if (row_bytes == 0 || rows == 0) return;
  if (dst_device < 0 && src_device < 0) {
    for (size_t r = 0; r < rows; ++r) {
      std::memcpy(static_cast<char*>(dst) + r * dst_pitch, static_cast<const char*>(src) + r * src_pitch, row_bytes);
    }
    return;
  }
  if (dst_device >= 0 && src_device >= 0 && dst_device != src_device) {
    // Between two GPUs (rare here): a peer copy per row, ordered as copy_bytes orders them.
    for (size_t r = 0; r < rows; ++r) {
      copy_bytes(static_cast<char*>(dst) + r * dst_pitch, dst_device, static_cast<const char*>(src) + r * src_pitch,
                 src_device, row_bytes);
    }
    return;
  }
  const int dev = dst_device >= 0 ? dst_device : src_device;
  DeviceContext& ctx = context(dev);
  DeviceGuard g(dev);
  const cudaMemcpyKind kind = dst_device >= 0 && src_device >= 0 ? cudaMemcpyDeviceToDevice
                              : dst_device >= 0                  ? cudaMemcpyHostToDevice
                                                                 : cudaMemcpyDeviceToHost;
  STRATA_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows, kind, ctx.compute));
  // As copy_bytes: the host may read dst or overwrite src right after a copy that touches it.
  if (kind != cudaMemcpyDeviceToDevice) STRATA_CUDA_CHECK(cudaStreamSynchronize(ctx.compute));
}

void zero_bytes(void* ptr, size_t bytes, int index) {
  if (bytes == 0) return;
  DeviceContext& ctx = context(index);
  DeviceGuard g(index);
  STRATA_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, ctx.compute));
}

void set_bytes(void* ptr, uint8_t byte, size_t bytes, int index) {
  if (bytes == 0) return;
  DeviceContext& ctx = context(index);
  DeviceGuard g(index);
  STRATA_CUDA_CHECK(cudaMemsetAsync(ptr, byte, bytes, ctx.compute));
}

void fill_f32(float* ptr, int64_t n, float value, int index) {
  if (n <= 0) return;
  DeviceGuard g(index);
  fill(n, value, ptr);  // framework/cuda/math.h, on the compute stream of `index`
}

void axpy_f32(int64_t n, float alpha, const float* x, float* y, int index) {
  if (n <= 0) return;
  DeviceGuard g(index);
  axpy(n, alpha, x, y);  // framework/cuda/math.h, on the compute stream of `index`
}

void* pinned_alloc(size_t bytes) {
  void* p = nullptr;
  STRATA_CUDA_CHECK(cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocDefault));
  return p;
}

void pinned_free(void* ptr) noexcept {
  if (ptr) cudaFreeHost(ptr);
}

void copy_to_device_queued(void* dst, const void* host, size_t bytes, int index) {
  if (bytes == 0) return;
  DeviceContext& ctx = context(index);
  DeviceGuard g(index);
  STRATA_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, ctx.compute));
}

void copy_to_host_queued(void* host, const void* src, size_t bytes, int index) {
  if (bytes == 0) return;
  DeviceContext& ctx = context(index);
  DeviceGuard g(index);
  STRATA_CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, ctx.compute));
}

StreamMark::StreamMark(int index) : index_(index) {
  DeviceGuard g(index);
  cudaEvent_t e = nullptr;
  STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  event_ = e;
}

StreamMark::~StreamMark() {
  if (!event_) return;
  cudaEventSynchronize(static_cast<cudaEvent_t>(event_));
  cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

void StreamMark::record() {
  DeviceContext& ctx = context(index_);
  DeviceGuard g(index_);
  STRATA_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event_), ctx.compute));
}

void StreamMark::wait() {
  DeviceGuard g(index_);
  STRATA_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)));
}

void add_weighted_loss(double* sum, const float* x, float weight, int index) {
  DeviceGuard g(index);
  add_weighted_loss(sum, x, weight);  // framework/cuda/math.h
}

void fill_f32_scaled(float* ptr, int64_t n, float weight, const double* scale, int index) {
  if (n <= 0) return;
  DeviceGuard g(index);
  fill_scaled(n, weight, scale, ptr);  // framework/cuda/math.h
}

void pack_step_results(float* out, const double* loss, float share, float stop, int index) {
  DeviceGuard g(index);
  pack_step_results(out, loss, share, stop);  // framework/cuda/math.h
}

void unpack_step_results(double* loss, double* stop, const float* in, int index) {
  DeviceGuard g(index);
  unpack_step_results(loss, stop, in);  // framework/cuda/math.h
}

void read_scalars(const std::vector<const float*>& device_ptrs, float* out, int index) {
  if (device_ptrs.empty()) return;
  DeviceContext& ctx = context(index);
  DeviceGuard g(index);
  for (size_t i = 0; i < device_ptrs.size(); ++i) {
    STRATA_CUDA_CHECK(cudaMemcpyAsync(out + i, device_ptrs[i], sizeof(float), cudaMemcpyDeviceToHost, ctx.compute));
  }
  STRATA_CUDA_CHECK(cudaStreamSynchronize(ctx.compute));
}

void synchronize(int index) {
  DeviceContext& ctx = context(index);
  DeviceGuard g(index);
  STRATA_CUDA_CHECK(cudaStreamSynchronize(ctx.compute));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(ctx.copy));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(ctx.comm));
}

AllocatorStats memory_stats(int index) { return context(index).cache->stats(); }
void reset_peak_memory_stats(int index) { context(index).cache->reset_peak(); }

void empty_cache(int index) {
  synchronize(index);
  context(index).cache->empty_cache();
}

void release_workspace(int index) {
  DeviceContext& ctx = context(index);
  std::lock_guard<std::mutex> lock(ctx.mu);
  if (ctx.workspace) ctx.cache->free(ctx.workspace);  // stream-ordered, as when it grows
  ctx.workspace = nullptr;
  ctx.workspace_bytes = 0;
}

std::string memory_report(int index) {
  DeviceContext& ctx = context(index);
  DeviceGuard g(index);
  cudaDeviceProp prop{};
  STRATA_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  size_t free_b = 0, total_b = 0;
  STRATA_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  std::ostringstream os;
  os << "cuda:" << index << " (" << prop.name << "): " << ctx.cache->stats().str() << "; device "
     << format_bytes(total_b) << " total, " << format_bytes(free_b) << " free";
  return os.str();
}

// ---- streams.h ----

PinnedBuffer::~PinnedBuffer() {
  if (pending_ && done_) cudaEventSynchronize(done_);
  if (done_) cudaEventDestroy(done_);
  if (ptr_) cudaFreeHost(ptr_);
}

void PinnedBuffer::resize(size_t bytes) {
  if (bytes <= bytes_) return;
  wait_copies_done();
  if (ptr_) STRATA_CUDA_CHECK(cudaFreeHost(ptr_));
  ptr_ = nullptr;
  bytes_ = 0;
  STRATA_CUDA_CHECK(cudaHostAlloc(&ptr_, bytes, cudaHostAllocDefault));
  bytes_ = bytes;
}

void PinnedBuffer::record_copy(cudaStream_t stream) {
  if (!done_) STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  STRATA_CUDA_CHECK(cudaEventRecord(done_, stream));
  pending_ = true;
}

void PinnedBuffer::wait_copies_done() {
  if (!pending_) return;
  STRATA_CUDA_CHECK(cudaEventSynchronize(done_));
  pending_ = false;
}

void stream_wait(cudaStream_t waiter, cudaStream_t producer) {
  if (waiter == producer) return;
  cudaEvent_t ev = nullptr;
  STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  STRATA_CUDA_CHECK(cudaEventRecord(ev, producer));
  STRATA_CUDA_CHECK(cudaStreamWaitEvent(waiter, ev, 0));
  STRATA_CUDA_CHECK(cudaEventDestroy(ev));  // safe: destruction is deferred until the event completes
}

void copy_to_device_async(void* dst, const void* src, size_t bytes, PinnedBuffer* src_buffer) {
  if (bytes == 0) return;
  DeviceContext& ctx = current();
  // dst may still be read by earlier compute work (the previous batch):
  // the copy stream starts after it.
  stream_wait(ctx.copy, ctx.compute);
  STRATA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx.copy));
  if (src_buffer) src_buffer->record_copy(ctx.copy);
  stream_wait(ctx.compute, ctx.copy);
}

EventTimer::EventTimer() {
  STRATA_CUDA_CHECK(cudaEventCreate(&start_));
  STRATA_CUDA_CHECK(cudaEventCreate(&stop_));
}

EventTimer::~EventTimer() {
  cudaEventDestroy(start_);
  cudaEventDestroy(stop_);
}

void EventTimer::start() { STRATA_CUDA_CHECK(cudaEventRecord(start_, compute_stream())); }
void EventTimer::stop() { STRATA_CUDA_CHECK(cudaEventRecord(stop_, compute_stream())); }

float EventTimer::elapsed_ms() {
  STRATA_CUDA_CHECK(cudaEventSynchronize(stop_));
  float ms = 0.0f;
  STRATA_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
  return ms;
}

// ---- step graphs ----

struct CapturedGraph {
  int device = 0;
  int pool = 0;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
};

namespace {
thread_local int t_capture_pool = 0;  // the pool of the capture this thread has open
}  // namespace

void begin_capture(int index) {
  DeviceGuard guard(index);
  DeviceContext& ctx = context(index);
  STRATA_CHECK(t_capture_pool == 0, "a step graph capture is already open on this thread");
  t_capture_pool = ctx.cache->open_pool();
  {
    // The shared workspace joins the pool (the same block, freed and taken
    // again while it is open): grown later, it must not serve anyone else.
    std::lock_guard<std::mutex> lock(ctx.mu);
    if (ctx.workspace) {
      ctx.cache->free(ctx.workspace);
      ctx.workspace = device_malloc(ctx.workspace_bytes, index);
    }
  }
  const cudaError_t e = cudaStreamBeginCapture(ctx.compute, cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) {
    ctx.cache->release_pool(t_capture_pool);
    t_capture_pool = 0;
    STRATA_CUDA_CHECK(e);
  }
}

CapturedGraph* end_capture(int index) {
  DeviceGuard guard(index);
  DeviceContext& ctx = context(index);
  auto g = std::make_unique<CapturedGraph>();
  g->device = index;
  g->pool = t_capture_pool;
  t_capture_pool = 0;
  ctx.cache->close_pool();
  const cudaError_t ended = cudaStreamEndCapture(ctx.compute, &g->graph);
  cudaError_t made = ended;
  if (ended == cudaSuccess) made = cudaGraphInstantiateWithFlags(&g->exec, g->graph, 0);
  if (made != cudaSuccess) {
    (void)cudaGetLastError();  // an invalidated capture is not the next launch's error
    if (g->graph) cudaGraphDestroy(g->graph);
    ctx.cache->release_pool(g->pool);
    fail<Error>("the step could not be captured as a CUDA graph: ", cudaGetErrorString(made));
  }
  return g.release();
}

void abandon_capture(int index) noexcept {
  try {
    DeviceGuard guard(index);
    DeviceContext& ctx = context(index);
    ctx.cache->close_pool();
    cudaGraph_t graph = nullptr;
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(ctx.compute, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
      cudaStreamEndCapture(ctx.compute, &graph);
    }
    if (graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    // Nothing captured ever ran: the pool's blocks are free for everyone again.
    ctx.cache->release_pool(t_capture_pool);
  } catch (...) {
  }
  t_capture_pool = 0;
}

void launch_graph(CapturedGraph* graph) {
  DeviceGuard guard(graph->device);
  STRATA_CUDA_CHECK(cudaGraphLaunch(graph->exec, context(graph->device).compute));
}

void destroy_graph(CapturedGraph* graph) noexcept {
  if (!graph) return;
  try {
    DeviceGuard guard(graph->device);
    DeviceContext& ctx = context(graph->device);
    cudaStreamSynchronize(ctx.compute);  // its last replay may still run
    if (graph->exec) cudaGraphExecDestroy(graph->exec);
    if (graph->graph) cudaGraphDestroy(graph->graph);
    ctx.cache->release_pool(graph->pool);
  } catch (...) {
  }
  delete graph;
}

}  // namespace strata::cuda

#endif  // STRATA_WITH_CUDA
