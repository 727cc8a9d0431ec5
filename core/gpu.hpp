// RAII wrappers over the CUDA runtime: every failure becomes a vfp::Error that names the
// call, the file and line, and the CUDA error string. Compiled only with VFPIPE_HAVE_CUDA.
#pragma once
#include <cstddef>
#include <string>

struct CUstream_st;
struct CUevent_st;

namespace vfp::cuda {

using StreamHandle = CUstream_st*;  // == cudaStream_t

// Throws vfp::Error (Gpu, or OutOfMemory for cudaErrorMemoryAllocation).
void check(int cuda_error, const char* what, const char* file, int line);
#define VFP_CUDA(call) ::vfp::cuda::check(static_cast<int>(call), #call, __FILE__, __LINE__)

struct DeviceInfo {
  bool usable = false;
  std::string reason;  // why not usable (driver missing, no device, ...)
  std::string name;
  int device = 0;
  int cc_major = 0, cc_minor = 0;
  size_t total_mem = 0;
  int async_engines = 0;
};
// Queries the runtime once; never throws. Safe on machines without a driver. With
// VFP_CUDA_SCHEDULE set it first applies set_wait_mode() of that value.
const DeviceInfo& probe();
// How host threads wait for the device, on every visible GPU's context (the flags belong to
// each context): "spin" answers soonest, "yield" spins but gives the core up, "blocking"
// sleeps and leaves the cores to other host work; anything else the runtime's choice (it
// spins while there are fewer contexts than cores). The calling thread keeps its device.
// False when some device refused; never throws.
bool set_wait_mode(const std::string& how);
// Device memory in use now (total - free, all processes), in bytes; 0 if it cannot be read.
size_t device_memory_used();
// CUDA devices visible to this process (0 when none is usable); never throws.
int device_count();
// The calling thread's current device (cudaGetDevice; 0 when it cannot be read), and
// setting it: every thread that works for one pipeline sets that pipeline's device.
int current_device();
void set_device(int device);  // throws vfp::Error (Gpu)
// The calling thread on `device` until the scope ends, then back on the device it had
// (work for several GPUs from one thread, e.g. a search made on each).
class DeviceScope {
 public:
  explicit DeviceScope(int device);  // throws vfp::Error (Gpu)
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_;
};
// The runtime's primary context of `device` (a CUcontext), started if it was not, and made
// the calling thread's device: for libraries that take a driver context (libav's NVDEC), so
// that their device memory is ours. Throws vfp::Error (Gpu).
void* primary_context(int device);
// The name of a device ("" when it cannot be read).
std::string device_name(int device);

void* host_alloc_pinned(size_t bytes);
void host_free_pinned(void* p);

// Frame memory kept for reuse once its owner frees it, up to `max_bytes` of pinned host
// memory and as much device memory per GPU (0, the default: off; past the cap, held blocks
// are freed to make room). For vfpipe batch, which
// runs item after item with the same frame sizes on several lanes: the driver serialises
// pinned allocations across the whole process, and cudaFree waits for the whole device, so
// one lane's item ending would stall the others. Only memory whose work has completed may
// be released into it (the engine's frames and slots, freed after their streams are
// synchronised). An allocation that fails empties the cache and tries again. Turning it off
// (0) frees what it holds.
void enable_frame_memory_reuse(size_t max_bytes);
// What the reuse saved so far: allocations served from it, and all allocations asked of it.
struct ReuseStats {
  int64_t reused = 0, asked = 0;
};
ReuseStats frame_memory_reuse_stats();
// Pinned frame memory through the reuse cache (plain host_alloc_pinned when it is off).
void* host_alloc_pinned_frame(size_t bytes);
void host_free_pinned_frame(void* p, size_t bytes);

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes, const char* what = "device buffer");
  // A frame's device memory through the reuse cache (enable_frame_memory_reuse): the caller
  // frees it only after the work that uses it has completed.
  static DeviceBuffer frame(size_t bytes, const char* what);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  unsigned char* get() const { return static_cast<unsigned char*>(ptr_); }
  size_t size() const { return size_; }

 private:
  void release();
  void* ptr_ = nullptr;
  size_t size_ = 0;
  int reuse_device_ = -1;  // >= 0: returned to the reuse cache of this device
  int device_ = -1;        // where it was allocated: freed there whatever the thread's device
};

class Stream {
 public:
  // Non-blocking w.r.t. the legacy default stream. With frame memory reuse on, streams (and
  // events) are kept for the next owner on the device: creating them costs driver calls that
  // grow with the number of GPUs, every file of a batch.
  Stream();
  ~Stream();
  Stream(Stream&& o) noexcept : s_(o.s_), device_(o.device_) { o.s_ = nullptr; }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  StreamHandle get() const { return s_; }
  void synchronize() const;

 private:
  StreamHandle s_ = nullptr;
  int device_ = -1;  // taken from the reuse pool of this device (-1: its own)
};

class Event {
 public:
  Event();  // with timing
  ~Event();
  Event(Event&& o) noexcept : e_(o.e_), device_(o.device_) { o.e_ = nullptr; }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(StreamHandle s);
  void synchronize() const;
  bool query() const;  // true when complete
  CUevent_st* get() const { return e_; }
  // Milliseconds between two completed events.
  static float elapsed_ms(const Event& start, const Event& end);

 private:
  CUevent_st* e_ = nullptr;
  int device_ = -1;
};

// Makes `s` wait (on the device, not the host) until `e` has completed.
void stream_wait(StreamHandle s, const Event& e);
// Runs fn(arg) on a CUDA-owned host thread once the work queued on `s` before it is done
// (cudaLaunchHostFunc). fn must not call CUDA and should return quickly: `s` waits for it.
void launch_host_func(StreamHandle s, void (*fn)(void*), void* arg);
void memcpy_h2d_async(void* dst, const void* src, size_t bytes, StreamHandle s);
// A host-to-device copy that has landed on return, ordered before any later work on any
// stream: cudaMemcpy from pageable memory may return before its DMA completes, on the
// legacy default stream, which does not order the non-blocking streams kernels run on.
void copy_to_device_now(void* dst, const void* src, size_t bytes);
void memcpy_d2h_async(void* dst, const void* src, size_t bytes, StreamHandle s);
void memcpy_d2d_async(void* dst, const void* src, size_t bytes, StreamHandle s);
void memset_async(void* dst, int value, size_t bytes, StreamHandle s);
// Waits on the host until the work queued on `s` is done (a stream owned by someone else).
void stream_synchronize(StreamHandle s);
// Checks for a kernel launch error (cudaGetLastError) and names the kernel.
void check_launch(const char* kernel, const char* file, int line);
#define VFP_CUDA_LAUNCHED(name) ::vfp::cuda::check_launch(name, __FILE__, __LINE__)

}  // namespace vfp::cuda
