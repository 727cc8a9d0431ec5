#include "cuda/mmp_postfilter.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "core/error.hpp"

namespace vfp::cuda {

namespace {

constexpr int kBins = mmp::kPostMaxActivity + 1;
constexpr int kClasses = mmp::kPostClasses, kTaps = mmp::kPostTaps, kTerms = mmp::kPostTerms;
constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;  // grid-stride loops: enough to fill the GPU, few histogram flushes

// What the kernels share, in one device allocation cleared once a plane (the taps are
// written by the host before the second half).
struct Small {
  unsigned hist[kBins];                  // the 3x3 activity sums' histogram
  int t[4];                              // the class thresholds (the quartiles)
  long long sums[kClasses][kTerms + 1];  // the normal equations' sums, then the count
  long long gain[kClasses];
  int taps[kClasses][kTaps];
  int on[kClasses];
};

// (dy, dx) of the six taps (postfilter.cpp's kOffsets).
__constant__ int kOffY[kTaps] = {0, 0, 1, 2, 1, 1};
__constant__ int kOffX[kTaps] = {1, 2, 0, 0, 1, -1};

// Sample (y, x) with the plane's edge replicated beyond it.
__device__ __forceinline__ int at(const uint8_t* p, int w, int h, int y, int x) {
  y = min(max(y, 0), h - 1);
  x = min(max(x, 0), w - 1);
  return p[static_cast<size_t>(y) * w + x];
}

// r(+o_k) + r(-o_k) - 2 r0 for the six taps at (y, x).
__device__ __forceinline__ void pairs(const uint8_t* r, int w, int h, int y, int x, int r0, int (&u)[kTaps]) {
#pragma unroll
  for (int k = 0; k < kTaps; ++k)
    u[k] = at(r, w, h, y + kOffY[k], x + kOffX[k]) + at(r, w, h, y - kOffY[k], x - kOffX[k]) - 2 * r0;
}

__device__ __forceinline__ int class_of(int s, const int* t) { return (s > t[0]) + (s > t[1]) + (s > t[2]); }

__device__ __forceinline__ long long warp_sum(long long v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

// |2r - left - right| + |2r - up - down| of every sample.
__global__ void activity_kernel(const uint8_t* r, int w, int h, int16_t* act) {
  const size_t n = static_cast<size_t>(w) * h;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int y = static_cast<int>(i / w), x = static_cast<int>(i - static_cast<size_t>(y) * w);
    const int c = 2 * r[i];
    act[i] = static_cast<int16_t>(abs(c - at(r, w, h, y, x - 1) - at(r, w, h, y, x + 1)) +
                                  abs(c - at(r, w, h, y - 1, x) - at(r, w, h, y + 1, x)));
  }
}

// Each sample's 3x3 sum of the activity (replicated beyond the edge), and their histogram.
__global__ void __launch_bounds__(kThreads)
    activity_sums_kernel(const int16_t* act, int w, int h, int16_t* sum, Small* sm) {
  __shared__ unsigned hist[kBins];
  for (int v = threadIdx.x; v < kBins; v += blockDim.x) hist[v] = 0;
  __syncthreads();
  const size_t n = static_cast<size_t>(w) * h;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int y = static_cast<int>(i / w), x = static_cast<int>(i - static_cast<size_t>(y) * w);
    int s = 0;
#pragma unroll
    for (int dy = -1; dy <= 1; ++dy) {
      const int16_t* row = act + static_cast<size_t>(min(max(y + dy, 0), h - 1)) * w;
#pragma unroll
      for (int dx = -1; dx <= 1; ++dx) s += row[min(max(x + dx, 0), w - 1)];
    }
    sum[i] = static_cast<int16_t>(s);
    atomicAdd(&hist[s], 1u);
  }
  __syncthreads();
  for (int v = threadIdx.x; v < kBins; v += blockDim.x)
    if (hist[v]) atomicAdd(&sm->hist[v], hist[v]);
}

// The values at ranks n/4, n/2, 3n/4 of the sorted sums: for rank k the least v whose
// count of sums <= v exceeds k (postfilter.cpp's classify()). One block of 1024 threads,
// each over a run of bins, a scan of the runs' counts, and the run holding the rank walks it.
__global__ void __launch_bounds__(1024) thresholds_kernel(Small* sm, long long n) {
  constexpr int kPer = (kBins + 1023) / 1024;
  __shared__ long long pre[1024];
  const int lo = threadIdx.x * kPer, hi = min(lo + kPer, kBins);
  long long mine = 0;
  for (int v = lo; v < hi; ++v) mine += sm->hist[v];
  pre[threadIdx.x] = mine;
  __syncthreads();
  for (int off = 1; off < 1024; off <<= 1) {
    const long long add = threadIdx.x >= off ? pre[threadIdx.x - off] : 0;
    __syncthreads();
    pre[threadIdx.x] += add;
    __syncthreads();
  }
  const long long below = pre[threadIdx.x] - mine;
  for (int q = 0; q < 3; ++q) {
    const long long k = n * (q + 1) / 4;
    if (below <= k && k < below + mine) {
      long long b = below;
      int v = lo;
      while (b + sm->hist[v] <= k) b += sm->hist[v++];
      sm->t[q] = v;
    }
  }
}

// The normal equations' integer sums of class blockIdx.y: the 21 products u_k u_j (k <= j),
// the 6 products u_k (orig - r0), and the count.
__global__ void __launch_bounds__(kThreads)
    normal_sums_kernel(const uint8_t* r, const uint8_t* o, const int16_t* sum, int w, int h, Small* sm) {
  const int cls = blockIdx.y;
  const int t[3] = {sm->t[0], sm->t[1], sm->t[2]};
  long long acc[kTerms + 1] = {};
  const size_t n = static_cast<size_t>(w) * h;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    if (class_of(sum[i], t) != cls) continue;
    const int y = static_cast<int>(i / w), x = static_cast<int>(i - static_cast<size_t>(y) * w);
    const int r0 = r[i];
    int u[kTaps];
    pairs(r, w, h, y, x, r0, u);
    const int e = static_cast<int>(o[i]) - r0;
    int m = 0;
#pragma unroll
    for (int k = 0; k < kTaps; ++k)
#pragma unroll
      for (int j = k; j < kTaps; ++j) acc[m++] += u[k] * u[j];
#pragma unroll
    for (int k = 0; k < kTaps; ++k) acc[mmp::kPostSym + k] += u[k] * e;
    ++acc[kTerms];
  }
  __shared__ unsigned long long block[kTerms + 1];
  if (threadIdx.x <= kTerms) block[threadIdx.x] = 0;
  __syncthreads();
#pragma unroll
  for (int m = 0; m <= kTerms; ++m) {
    const long long v = warp_sum(acc[m]);
    if ((threadIdx.x & 31) == 0 && v) atomicAdd(&block[m], static_cast<unsigned long long>(v));
  }
  __syncthreads();
  if (threadIdx.x <= kTerms && block[threadIdx.x])
    atomicAdd(reinterpret_cast<unsigned long long*>(&sm->sums[cls][threadIdx.x]), block[threadIdx.x]);
}

// Every sample filtered with its class's taps (postfilter.cpp's filtered()), into `out`, and
// each class's SSE before minus after.
__global__ void __launch_bounds__(kThreads)
    filter_gain_kernel(const uint8_t* r, const uint8_t* o, const int16_t* sum, int w, int h, Small* sm, uint8_t* out) {
  __shared__ int taps[kClasses][kTaps];
  __shared__ int t[3];
  __shared__ unsigned long long block[kClasses];
  if (threadIdx.x < kClasses * kTaps) taps[threadIdx.x / kTaps][threadIdx.x % kTaps] = sm->taps[0][threadIdx.x];
  if (threadIdx.x < 3) t[threadIdx.x] = sm->t[threadIdx.x];
  if (threadIdx.x < kClasses) block[threadIdx.x] = 0;
  __syncthreads();
  long long gain[kClasses] = {};
  const size_t n = static_cast<size_t>(w) * h;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int c = class_of(sum[i], t);
    const int y = static_cast<int>(i / w), x = static_cast<int>(i - static_cast<size_t>(y) * w);
    const int r0 = r[i];
    int u[kTaps];
    pairs(r, w, h, y, x, r0, u);
    int acc = r0 << mmp::kPostTapBits;
#pragma unroll
    for (int k = 0; k < kTaps; ++k) acc += taps[c][k] * u[k];
    const int v = min(max((acc + (1 << (mmp::kPostTapBits - 1))) >> mmp::kPostTapBits, 0), 255);
    out[i] = static_cast<uint8_t>(v);
    const int before = static_cast<int>(o[i]) - r0, after = static_cast<int>(o[i]) - v;
    const int g = before * before - after * after;
#pragma unroll
    for (int k = 0; k < kClasses; ++k) gain[k] += k == c ? g : 0;
  }
#pragma unroll
  for (int k = 0; k < kClasses; ++k) {
    const long long v = warp_sum(gain[k]);
    if ((threadIdx.x & 31) == 0 && v) atomicAdd(&block[k], static_cast<unsigned long long>(v));
  }
  __syncthreads();
  if (threadIdx.x < kClasses && block[threadIdx.x])
    atomicAdd(reinterpret_cast<unsigned long long*>(&sm->gain[threadIdx.x]), block[threadIdx.x]);
}

// The classes kept (post_filter_keep()'s rule, its double arithmetic unfused), and the
// unfiltered sample back wherever its class is off.
__global__ void __launch_bounds__(kThreads)
    keep_kernel(const uint8_t* r, const int16_t* sum, int w, int h, double lambda, Small* sm, uint8_t* out) {
  __shared__ int on[kClasses];
  __shared__ int t[3];
  if (threadIdx.x < kClasses) {
    const double price =
        __dmul_rn(__dmul_rn(lambda, static_cast<double>(kTaps)), static_cast<double>(mmp::kPostTapBits));
    on[threadIdx.x] = __ll2double_rn(sm->gain[threadIdx.x]) > price;
    if (blockIdx.x == 0) sm->on[threadIdx.x] = on[threadIdx.x];
  }
  if (threadIdx.x < 3) t[threadIdx.x] = sm->t[threadIdx.x];
  __syncthreads();
  if (on[0] && on[1] && on[2] && on[3]) return;
  const size_t n = static_cast<size_t>(w) * h;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    if (!on[class_of(sum[i], t)]) out[i] = r[i];
}

struct PinnedHost {
  void* p = nullptr;
  size_t bytes = 0;
  PinnedHost() = default;
  PinnedHost(const PinnedHost&) = delete;
  PinnedHost& operator=(const PinnedHost&) = delete;
  ~PinnedHost() {
    if (p) host_free_pinned(p);
  }
  void reserve(size_t n) {
    if (n <= bytes) return;
    if (p) host_free_pinned(p);
    p = nullptr, bytes = 0;
    p = host_alloc_pinned(n);
    bytes = n;
  }
  uint8_t* get() const { return static_cast<uint8_t*>(p); }
};

}  // namespace

struct MmpPostFilter::Buffers {
  Stream stream;
  size_t cap = 0;          // samples a plane
  DeviceBuffer planes;     // rec, orig, out: cap bytes each
  DeviceBuffer act, sums;  // int16 each, cap
  DeviceBuffer small{sizeof(Small), "post-filter sums"};
  PinnedHost host_planes;  // rec, orig up; out down
  PinnedHost host_small;   // a Small
  int blocks_max = kMaxBlocks;
};

MmpPostFilter::MmpPostFilter() : b_(std::make_unique<Buffers>()) {
  b_->host_small.reserve(sizeof(Small));
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, current_device()) == cudaSuccess && sms > 0)
    b_->blocks_max = std::min(kMaxBlocks, 4 * sms);
}

MmpPostFilter::~MmpPostFilter() = default;

mmp::PostFilter MmpPostFilter::design(const uint8_t* rec, const uint8_t* orig, int w, int h, double lambda,
                                      uint8_t* out) {
  mmp::PostFilter f;
  if (w < 1 || h < 1) return f;
  Buffers& b = *b_;
  const size_t n = static_cast<size_t>(w) * h;
  if (n > b.cap) {
    b.planes = DeviceBuffer(3 * n, "post-filter planes");
    b.act = DeviceBuffer(sizeof(int16_t) * n, "post-filter activity");
    b.sums = DeviceBuffer(sizeof(int16_t) * n, "post-filter activity sums");
    b.host_planes.reserve(3 * n);
    b.cap = n;
  }
  const StreamHandle st = b.stream.get();
  uint8_t* d_rec = b.planes.get();
  uint8_t* d_orig = d_rec + n;
  uint8_t* d_out = d_orig + n;
  auto* act = reinterpret_cast<int16_t*>(b.act.get());
  auto* sum = reinterpret_cast<int16_t*>(b.sums.get());
  auto* sm = reinterpret_cast<Small*>(b.small.get());
  auto* hs = reinterpret_cast<Small*>(b.host_small.get());
  std::memcpy(b.host_planes.get(), rec, n);
  std::memcpy(b.host_planes.get() + n, orig, n);
  memcpy_h2d_async(d_rec, b.host_planes.get(), 2 * n, st);
  memset_async(sm, 0, sizeof(Small), st);
  const int grid = static_cast<int>(std::min<size_t>((n + kThreads - 1) / kThreads, static_cast<size_t>(b.blocks_max)));

  activity_kernel<<<grid, kThreads, 0, st>>>(d_rec, w, h, act);
  VFP_CUDA_LAUNCHED("mmp post-filter activity");
  activity_sums_kernel<<<grid, kThreads, 0, st>>>(act, w, h, sum, sm);
  VFP_CUDA_LAUNCHED("mmp post-filter activity sums");
  thresholds_kernel<<<1, 1024, 0, st>>>(sm, static_cast<long long>(n));
  VFP_CUDA_LAUNCHED("mmp post-filter thresholds");
  normal_sums_kernel<<<dim3(static_cast<unsigned>(grid), kClasses), kThreads, 0, st>>>(d_rec, d_orig, sum, w, h, sm);
  VFP_CUDA_LAUNCHED("mmp post-filter normal sums");
  memcpy_d2h_async(hs->sums, sm->sums, sizeof(hs->sums), st);
  b.stream.synchronize();

  mmp::PostFilterSums s;
  for (int c = 0; c < kClasses; ++c) {
    for (int m = 0; m < kTerms; ++m) s.t[c][m] = hs->sums[c][m];
    s.count[c] = hs->sums[c][kTerms];
  }
  f = mmp::post_filter_taps(s);
  std::memcpy(hs->taps, f.taps, sizeof(hs->taps));
  memcpy_h2d_async(sm->taps, hs->taps, sizeof(hs->taps), st);
  filter_gain_kernel<<<grid, kThreads, 0, st>>>(d_rec, d_orig, sum, w, h, sm, d_out);
  VFP_CUDA_LAUNCHED("mmp post-filter filter and gain");
  keep_kernel<<<grid, kThreads, 0, st>>>(d_rec, sum, w, h, lambda, sm, d_out);
  VFP_CUDA_LAUNCHED("mmp post-filter keep");
  memcpy_d2h_async(b.host_planes.get() + 2 * n, d_out, n, st);
  memcpy_d2h_async(hs->gain, sm->gain, sizeof(hs->gain) + sizeof(hs->taps) + sizeof(hs->on), st);
  b.stream.synchronize();

  int64_t gain[kClasses];
  for (int c = 0; c < kClasses; ++c) gain[c] = hs->gain[c];
  mmp::post_filter_keep(gain, lambda, &f);
  for (int c = 0; c < kClasses; ++c)
    if ((hs->on[c] != 0) != f.on[c])
      throw Error(ErrorKind::Internal, "MMP post-filter: the device kept other classes than the host's rule");
  std::memcpy(out, b.host_planes.get() + 2 * n, n);
  return f;
}

}  // namespace vfp::cuda
