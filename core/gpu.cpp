#include "core/gpu.hpp"

#include <cuda_runtime.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"

namespace vfp::cuda {

void check(int code, const char* what, const char* file, int line) {
  auto err = static_cast<cudaError_t>(code);
  if (err == cudaSuccess) return;
  cudaGetLastError();  // clear sticky-less errors so later calls are not poisoned
  const char* base = file;
  for (const char* p = file; *p; ++p)
    if (*p == '/') base = p + 1;
  std::string msg = log::format("CUDA error in %s (%s:%d): %s (%s)", what, base, line, cudaGetErrorString(err),
                                cudaGetErrorName(err));
  if (err == cudaErrorMemoryAllocation) throw Error(ErrorKind::OutOfMemory, "out of GPU memory: " + msg);
  throw Error(ErrorKind::Gpu, msg);
}

void check_launch(const char* kernel, const char* file, int line) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) check(err, kernel, file, line);
}

bool set_wait_mode(const std::string& how) {
  const unsigned flags = how == "spin"       ? cudaDeviceScheduleSpin
                         : how == "yield"    ? cudaDeviceScheduleYield
                         : how == "blocking" ? cudaDeviceScheduleBlockingSync
                                             : cudaDeviceScheduleAuto;
  int n = 0, here = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || cudaGetDevice(&here) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  bool all = true;
  for (int d = 0; d < n; ++d)
    if (cudaSetDevice(d) != cudaSuccess || cudaSetDeviceFlags(flags) != cudaSuccess) {
      cudaGetLastError();
      all = false;
    }
  if (cudaSetDevice(here) != cudaSuccess) cudaGetLastError();
  return all;
}

const DeviceInfo& probe() {
  static DeviceInfo info;
  static std::once_flag once;
  std::call_once(once, [] {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      if (err == cudaErrorInsufficientDriver)
        info.reason = "no NVIDIA driver found, or it is older than this CUDA runtime needs";
      else if (err == cudaErrorNoDevice)
        info.reason = "no CUDA device found";
      else
        info.reason = cudaGetErrorString(err);
      cudaGetLastError();
    }
    if (err == cudaSuccess && n == 0) info.reason = "no CUDA device found";
    if (!info.reason.empty()) {
      // A device list that hides every GPU is the usual reason on a machine that has some.
      const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
      if (visible && info.reason == "no CUDA device found")
        info.reason += log::format(" (CUDA_VISIBLE_DEVICES=%s)", visible);
      return;
    }
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
      info.reason = "cudaGetDeviceProperties failed";
      cudaGetLastError();
      return;
    }
    if (const char* e = std::getenv("VFP_CUDA_SCHEDULE")) set_wait_mode(e);
    // A context must actually come up (e.g. the binary may lack code for this GPU).
    if ((err = cudaFree(nullptr)) != cudaSuccess) {
      info.reason = cudaGetErrorString(err);
      cudaGetLastError();
      return;
    }
    info.usable = true;
    info.name = prop.name;
    info.cc_major = prop.major;
    info.cc_minor = prop.minor;
    info.total_mem = prop.totalGlobalMem;
    info.async_engines = prop.asyncEngineCount;
  });
  return info;
}

void* host_alloc_pinned(size_t bytes) {
  void* p = nullptr;
  cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
  if (err != cudaSuccess) {
    cudaGetLastError();
    throw Error(ErrorKind::OutOfMemory, log::format("cannot allocate %.1f MiB of pinned host memory: %s",
                                                    bytes / 1048576.0, cudaGetErrorString(err)));
  }
  return p;
}

namespace {

// Freed frame memory by (device, size), kept for the next allocation of that size on that
// device; pinned host memory is "device" kHost.
constexpr int kHost = -1;

struct ReuseCache {
  std::mutex mu;
  size_t max_bytes = 0;
  std::map<int, size_t> held;  // bytes held per device
  std::multimap<std::pair<int, size_t>, void*> blocks;
  int64_t reused = 0, asked = 0;

  void* take(int dev, size_t bytes) {
    std::lock_guard<std::mutex> lk(mu);
    ++asked;
    auto it = blocks.find({dev, bytes});
    if (it == blocks.end()) return nullptr;
    void* p = it->second;
    blocks.erase(it);
    held[dev] -= bytes;
    ++reused;
    return p;
  }
  // Keeps p, making room under the cap by evicting the device's held blocks (smallest
  // first: after the clips' size changed, the old size's), which go to `evicted` for the
  // caller to free outside the lock. False (p larger than the cap): p is the caller's to free.
  bool give(int dev, void* p, size_t bytes, std::vector<void*>& evicted) {
    std::lock_guard<std::mutex> lk(mu);
    if (bytes > max_bytes) return false;
    for (auto it = blocks.lower_bound({dev, 0});
         held[dev] + bytes > max_bytes && it != blocks.end() && it->first.first == dev;) {
      held[dev] -= it->first.second;
      evicted.push_back(it->second);
      it = blocks.erase(it);
    }
    blocks.emplace(std::make_pair(dev, bytes), p);
    held[dev] += bytes;
    return true;
  }
  // Frees what is held of one device (kHost: the pinned memory), or of every device.
  void flush(int dev) {
    free_if([dev](int d) { return d == dev; });
  }
  void flush_all() {
    free_if([](int) { return true; });
  }
  template <typename Pred>
  void free_if(Pred of_device) {
    std::vector<std::pair<int, void*>> out;
    {
      std::lock_guard<std::mutex> lk(mu);
      for (auto it = blocks.begin(); it != blocks.end();)
        if (of_device(it->first.first)) {
          out.emplace_back(it->first.first, it->second);
          held[it->first.first] -= it->first.second;
          it = blocks.erase(it);
        } else {
          ++it;
        }
    }
    for (const auto& [d, p] : out) d == kHost ? cudaFreeHost(p) : cudaFree(p);
  }
};

ReuseCache& reuse_cache() {
  static ReuseCache* c = new ReuseCache;  // never destroyed: the driver may be gone at exit
  return *c;
}

}  // namespace

namespace {
void flush_handles();  // the streams and events kept (below)
}  // namespace

void enable_frame_memory_reuse(size_t max_bytes) {
  ReuseCache& c = reuse_cache();
  {
    std::lock_guard<std::mutex> lk(c.mu);
    c.max_bytes = max_bytes;
  }
  if (max_bytes == 0) {  // off: what it holds is freed
    c.flush_all();
    flush_handles();
  }
}

ReuseStats frame_memory_reuse_stats() {
  std::lock_guard<std::mutex> lk(reuse_cache().mu);
  return {reuse_cache().reused, reuse_cache().asked};
}

void* host_alloc_pinned_frame(size_t bytes) {
  ReuseCache& c = reuse_cache();
  if (void* p = c.take(kHost, bytes)) return p;
  try {
    return host_alloc_pinned(bytes);
  } catch (const Error&) {
    c.flush(kHost);  // what the cache holds may be what is missing
    return host_alloc_pinned(bytes);
  }
}

void host_free_pinned_frame(void* p, size_t bytes) {
  if (!p) return;
  std::vector<void*> evicted;
  if (!reuse_cache().give(kHost, p, bytes, evicted)) evicted.push_back(p);
  for (void* e : evicted) host_free_pinned(e);
}

size_t device_memory_used() {
  size_t free_b = 0, total_b = 0;
  if (!probe().usable || cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return total_b - free_b;
}

int device_count() {
  if (!probe().usable) return 0;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

int current_device() {
  int d = 0;
  if (cudaGetDevice(&d) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return d;
}

void set_device(int device) { VFP_CUDA(cudaSetDevice(device)); }

DeviceScope::DeviceScope(int device) : previous_(current_device()) {
  if (device != previous_) set_device(device);
}
DeviceScope::~DeviceScope() { cudaSetDevice(previous_); }

void* primary_context(int device) {
  set_device(device);
  VFP_CUDA(cudaFree(nullptr));  // starts the runtime's context of `device` if it was not
  // The driver's cuCtxGetCurrent, found through the runtime: linking the driver library
  // would stop vfpipe from starting on machines without one.
  using GetCurrent = int (*)(void**);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  VFP_CUDA(cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 12000, cudaEnableDefault, &found));
  void* ctx = nullptr;
  if (found != cudaDriverEntryPointSuccess || !fn || reinterpret_cast<GetCurrent>(fn)(&ctx) != 0 || !ctx)
    throw Error(ErrorKind::Gpu, log::format("cannot read the CUDA context of device %d", device));
  return ctx;
}

std::string device_name(int device) {
  // Asked once per device: cudaGetDeviceProperties reads every property from the driver,
  // milliseconds that a batch would pay for every file.
  static std::mutex mu;
  static std::map<int, std::string> names;
  std::lock_guard<std::mutex> lk(mu);
  if (auto f = names.find(device); f != names.end()) return f->second;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  return names[device] = prop.name;
}

void host_free_pinned(void* p) {
  if (p) cudaFreeHost(p);
}

DeviceBuffer::DeviceBuffer(size_t bytes, const char* what) : size_(bytes) {
  if (bytes == 0) return;
  device_ = current_device();
  cudaError_t err = cudaMalloc(&ptr_, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    cudaGetLastError();
    std::string msg = log::format("cannot allocate %.1f MiB for %s (%.1f MiB free of %.1f MiB): %s", bytes / 1048576.0,
                                  what, free_b / 1048576.0, total_b / 1048576.0, cudaGetErrorString(err));
    throw Error(err == cudaErrorMemoryAllocation ? ErrorKind::OutOfMemory : ErrorKind::Gpu,
                (err == cudaErrorMemoryAllocation ? "out of GPU memory: " : "CUDA error: ") + msg);
  }
}

DeviceBuffer DeviceBuffer::frame(size_t bytes, const char* what) {
  DeviceBuffer b;
  if (bytes == 0) return b;
  const int dev = current_device();
  ReuseCache& c = reuse_cache();
  b.ptr_ = c.take(dev, bytes);
  if (!b.ptr_) {
    try {
      b = DeviceBuffer(bytes, what);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::OutOfMemory) throw;
      c.flush(dev);
      b = DeviceBuffer(bytes, what);
    }
  }
  b.size_ = bytes;
  b.reuse_device_ = dev;
  b.device_ = dev;
  return b;
}

void DeviceBuffer::release() {
  if (ptr_) {
    std::vector<void*> evicted;
    if (!(reuse_device_ >= 0 && reuse_cache().give(reuse_device_, ptr_, size_, evicted))) evicted.push_back(ptr_);
    // A buffer of one GPU may be dropped on a thread working on another (the mmp stage's
    // frames on several GPUs): freed on its own device, the thread's device left as it was.
    // Not a DeviceScope: a destructor's path, which must not throw (the driver may be gone).
    int here = -1;
    const bool away = !evicted.empty() && device_ >= 0 && cudaGetDevice(&here) == cudaSuccess && here != device_;
    if (away) cudaSetDevice(device_);
    for (void* e : evicted) cudaFree(e);
    if (away) cudaSetDevice(here);
  }
  ptr_ = nullptr;
  size_ = 0;
  reuse_device_ = -1;
  device_ = -1;
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(o.ptr_), size_(o.size_), reuse_device_(o.reuse_device_), device_(o.device_) {
  o.ptr_ = nullptr;
  o.size_ = 0;
  o.reuse_device_ = -1;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    release();
    ptr_ = o.ptr_;
    size_ = o.size_;
    reuse_device_ = o.reuse_device_;
    device_ = o.device_;
    o.ptr_ = nullptr;
    o.size_ = 0;
    o.reuse_device_ = -1;
  }
  return *this;
}

namespace {
// Streams and events kept for reuse while frame memory reuse is on (same switch: vfpipe
// batch). A stream may be handed on with work still queued: its next owner's work then runs
// after it, as on any stream. An event keeps its last record until it is recorded again.
struct HandlePool {
  static constexpr size_t kMaxPerDevice = 1024;
  std::mutex mu;
  std::map<int, std::vector<cudaStream_t>> streams;
  std::map<int, std::vector<cudaEvent_t>> events;
};
HandlePool& handle_pool() {
  static HandlePool* p = new HandlePool;  // never destroyed, as the reuse cache
  return *p;
}
bool reuse_on() {
  std::lock_guard<std::mutex> lk(reuse_cache().mu);
  return reuse_cache().max_bytes > 0;
}
template <typename H>
bool take_handle(std::map<int, std::vector<H>>& held, int dev, H* out) {
  std::lock_guard<std::mutex> lk(handle_pool().mu);
  auto f = held.find(dev);
  if (f == held.end() || f->second.empty()) return false;
  *out = f->second.back();
  f->second.pop_back();
  return true;
}
template <typename H>
bool give_handle(std::map<int, std::vector<H>>& held, int dev, H h) {
  if (!reuse_on()) return false;
  std::lock_guard<std::mutex> lk(handle_pool().mu);
  std::vector<H>& v = held[dev];
  if (v.size() >= HandlePool::kMaxPerDevice) return false;
  v.push_back(h);
  return true;
}
void flush_handles() {
  std::map<int, std::vector<cudaStream_t>> streams;
  std::map<int, std::vector<cudaEvent_t>> events;
  {
    std::lock_guard<std::mutex> lk(handle_pool().mu);
    streams.swap(handle_pool().streams);
    events.swap(handle_pool().events);
  }
  for (auto& [d, v] : streams)
    for (cudaStream_t h : v) cudaStreamDestroy(h);
  for (auto& [d, v] : events)
    for (cudaEvent_t h : v) cudaEventDestroy(h);
}
}  // namespace

Stream::Stream() {
  if (reuse_on()) {
    device_ = current_device();
    if (take_handle(handle_pool().streams, device_, &s_)) return;
  }
  VFP_CUDA(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
}
Stream::~Stream() {
  if (s_ && !(device_ >= 0 && give_handle(handle_pool().streams, device_, s_))) cudaStreamDestroy(s_);
}
void Stream::synchronize() const { VFP_CUDA(cudaStreamSynchronize(s_)); }

Event::Event() {
  if (reuse_on()) {
    device_ = current_device();
    if (take_handle(handle_pool().events, device_, &e_)) return;
  }
  VFP_CUDA(cudaEventCreate(&e_));
}
Event::~Event() {
  if (e_ && !(device_ >= 0 && give_handle(handle_pool().events, device_, e_))) cudaEventDestroy(e_);
}
void Event::record(StreamHandle s) { VFP_CUDA(cudaEventRecord(e_, s)); }
void Event::synchronize() const { VFP_CUDA(cudaEventSynchronize(e_)); }
bool Event::query() const {
  cudaError_t err = cudaEventQuery(e_);
  if (err == cudaErrorNotReady) return false;
  VFP_CUDA(err);
  return true;
}
float Event::elapsed_ms(const Event& a, const Event& b) {
  float ms = 0.f;
  VFP_CUDA(cudaEventElapsedTime(&ms, a.e_, b.e_));
  return ms;
}

void stream_wait(StreamHandle s, const Event& e) { VFP_CUDA(cudaStreamWaitEvent(s, e.get(), 0)); }
void launch_host_func(StreamHandle s, void (*fn)(void*), void* arg) { VFP_CUDA(cudaLaunchHostFunc(s, fn, arg)); }

void memcpy_h2d_async(void* dst, const void* src, size_t n, StreamHandle s) {
  VFP_CUDA(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s));
}
void copy_to_device_now(void* dst, const void* src, size_t n) {
  VFP_CUDA(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
  VFP_CUDA(cudaStreamSynchronize(cudaStreamLegacy));
}
void memcpy_d2h_async(void* dst, const void* src, size_t n, StreamHandle s) {
  VFP_CUDA(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, s));
}
void memcpy_d2d_async(void* dst, const void* src, size_t n, StreamHandle s) {
  VFP_CUDA(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s));
}
void memset_async(void* dst, int v, size_t n, StreamHandle s) { VFP_CUDA(cudaMemsetAsync(dst, v, n, s)); }
void stream_synchronize(StreamHandle s) { VFP_CUDA(cudaStreamSynchronize(s)); }

}  // namespace vfp::cuda
