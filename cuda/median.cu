#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "core/error.hpp"
#include "cuda/median.hpp"

namespace vfp::cuda {

namespace {

// ------------------------------------------------------------------ selection
// Two vertically adjacent pixels per thread, packed as the two halves of a half2. 8-bit
// values are exact fp16 integers, and HMNMX2 runs on the FP32 pipes at twice the rate of
// the 16x2 integer min/max (which ran at exactly the INT32 rate in docs/median.md).
__device__ __forceinline__ void cswap(__half2& a, __half2& b) {
  const __half2 lo = __hmin2(a, b);
  b = __hmax2(a, b);
  a = lo;
}

// Min to a[0], max to a[size-1] (2*size-3 compare-exchanges).
template <int SIZE>
__device__ __forceinline__ void minmax_to_ends(__half2* a) {
#pragma unroll
  for (int i = 1; i < SIZE; ++i) cswap(a[0], a[i]);
#pragma unroll
  for (int i = 1; i < SIZE - 1; ++i) cswap(a[i], a[SIZE - 1]);
}

// Forgetful selection: discards the D smallest and D largest of the S elements load(e)
// and leaves the K = S - 2D middle ones in out[]. The working set starts with D + K + 1
// elements, so whenever its min (max) is dropped, fewer unseen elements remain than
// smaller (larger) ones still to drop: the dropped element cannot be in the middle.
template <int S, int D, typename Load>
__device__ __forceinline__ void trim(Load load, __half2* out) {
  constexpr int K = S - 2 * D;
  constexpr int M = D + K + 1;
  static_assert(D >= 1 && M <= S, "trim needs something to drop");
  __half2 a[M];
#pragma unroll
  for (int e = 0; e < M; ++e) a[e] = load(e);
#pragma unroll
  for (int e = M; e < S; ++e) {
    const int size = M - (e - M);
#pragma unroll
    for (int i = 1; i < size; ++i) cswap(a[0], a[i]);
#pragma unroll
    for (int i = 1; i < size - 1; ++i) cswap(a[i], a[size - 1]);
    a[0] = load(e);  // the min's slot takes the next element; the max is forgotten
  }
  minmax_to_ends<K + 2>(a);  // the last min and max go
#pragma unroll
  for (int i = 0; i < K; ++i) out[i] = a[i + 1];
}

// Median of an odd number N of elements: trim to the middle one.
template <int N, typename Load>
__device__ __forceinline__ __half2 median_of(Load load) {
  __half2 m[1];
  trim<N, (N - 1) / 2>(load, m);
  return m[0];
}

constexpr int kSelBX = 32, kSelBY = 8;  // threads; each thread: 4 rows -> 32x32 outputs
constexpr int kSelRows = 4;

// Each thread computes 4 vertically adjacent pixels P0..P3 of one column. Lane .x of every
// half2 works for the pair (P0, P1), lane .y for (P2, P3). A pair's windows share WY-1
// rows (S samples); only the ranks C-WX..C of that shared part can still be either
// pixel's median (C = (N-1)/2), so it is trimmed once to those WX+1 values, and each
// pixel finishes with a median of 2*WX+1 (the WX+1 values and its own extra row).
template <int RX, int RY>
__global__ void __launch_bounds__(kSelBX* kSelBY)
    median_select_kernel(const uint8_t* __restrict__ src, int spitch, uint8_t* __restrict__ dst, int dpitch, int w,
                         int h, Border border, int value) {
  constexpr int WX = 2 * RX + 1, WY = 2 * RY + 1, N = WX * WY;
  constexpr int C = (N - 1) / 2;
  constexpr int S = WX * (WY - 1);  // shared by the two pixels of a pair
  constexpr int D = C - WX;         // dropped from each end of the shared part
  constexpr int K = WX + 1;         // kept
  constexpr int OY = kSelRows * kSelBY;
  constexpr int TW = kSelBX + 2 * RX, TH = OY + 2 * RY;
  __shared__ __half tile[TH][TW + 2];  // fp16 copies of the 8-bit samples

  const int x0 = blockIdx.x * kSelBX - RX, y0 = blockIdx.y * OY - RY;
  const bool interior = x0 >= 0 && y0 >= 0 && x0 + TW <= w && y0 + TH <= h;
  for (int i = threadIdx.y * kSelBX + threadIdx.x; i < TH * TW; i += kSelBX * kSelBY) {
    const int ty = i / TW, tx = i - ty * TW;
    int v;
    if (interior) {
      v = __ldg(src + static_cast<size_t>(y0 + ty) * spitch + x0 + tx);
    } else {
      const int gy = border_index(y0 + ty, h, border), gx = border_index(x0 + tx, w, border);
      v = (gy < 0 || gx < 0) ? value : __ldg(src + static_cast<size_t>(gy) * spitch + gx);
    }
    tile[ty][tx] = __ushort2half_rn(static_cast<unsigned short>(v));
  }
  __syncthreads();
  const int ox = blockIdx.x * kSelBX + threadIdx.x, oy = blockIdx.y * OY + kSelRows * threadIdx.y;
  if (ox >= w || oy >= h) return;
  const int tx = threadIdx.x, ty = kSelRows * threadIdx.y;  // tile row of P0's top window row

  // Shared element e: pair (P0,P1) uses tile rows ty+1.., pair (P2,P3) rows ty+3..
  __half2 mid[K];
  trim<S, D>(
      [&](int e) {
        const int r = e / WX, dx = e - r * WX;
        return __halves2half2(tile[ty + 1 + r][tx + dx], tile[ty + 3 + r][tx + dx]);
      },
      mid);
  // Top pixels (P0, P2): extra row above the shared part; bottom (P1, P3): row below.
  const __half2 top = median_of<2 * WX + 1>(
      [&](int e) { return e < K ? mid[e] : __halves2half2(tile[ty][tx + e - K], tile[ty + 2][tx + e - K]); });
  const __half2 bottom = median_of<2 * WX + 1>(
      [&](int e) { return e < K ? mid[e] : __halves2half2(tile[ty + WY][tx + e - K], tile[ty + 2 + WY][tx + e - K]); });
  const uint8_t p0 = static_cast<uint8_t>(__half2ushort_rn(__low2half(top)));
  const uint8_t p2 = static_cast<uint8_t>(__half2ushort_rn(__high2half(top)));
  const uint8_t p1 = static_cast<uint8_t>(__half2ushort_rn(__low2half(bottom)));
  const uint8_t p3 = static_cast<uint8_t>(__half2ushort_rn(__high2half(bottom)));
  uint8_t* d = dst + static_cast<size_t>(oy) * dpitch + ox;
  d[0] = p0;
  if (oy + 1 < h) d[dpitch] = p1;
  if (oy + 2 < h) d[2 * static_cast<size_t>(dpitch)] = p2;
  if (oy + 3 < h) d[3 * static_cast<size_t>(dpitch)] = p3;
}

template <int RX, int RY>
void launch_select(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h, const MedianParams& p,
                   StreamHandle s) {
  dim3 block(kSelBX, kSelBY);
  dim3 grid((w + kSelBX - 1) / kSelBX, (h + kSelRows * kSelBY - 1) / (kSelRows * kSelBY));
  median_select_kernel<RX, RY><<<grid, block, 0, s>>>(src, spitch, dst, dpitch, w, h, p.border, p.value);
  VFP_CUDA_LAUNCHED("median_select_kernel");
}

// ------------------------------------------------------------------ histogram
constexpr int kHistT = 64;  // threads (columns) per block
// Layout hist[bin * kHistT + thread] of 16-bit counters: thread t's counters sit in bank
// (t / 2) whatever the bin, so the 64 threads never conflict (two threads share a word).

__global__ void __launch_bounds__(kHistT)
    median_hist_kernel(const uint8_t* __restrict__ src, int spitch, uint8_t* __restrict__ dst, int dpitch, int w, int h,
                       int rx, int ry, int rank, Border border, int value, int rows_per_thread) {
  extern __shared__ uint16_t hist[];
  uint16_t* fine = hist;                   // 256 bins
  uint16_t* coarse = hist + 256 * kHistT;  // 16 bins (upper nibble)
  const int t = threadIdx.x;
  const int x = blockIdx.x * kHistT + t;
  const int y0 = blockIdx.y * rows_per_thread;
  if (x >= w || y0 >= h) return;  // private histograms: no block-wide synchronisation
  for (int b = 0; b < 256; ++b) fine[b * kHistT + t] = 0;
  for (int b = 0; b < 16; ++b) coarse[b * kHistT + t] = 0;

  auto add_row = [&](int y, int delta) {
    const int gy = border_index(y, h, border);
    const uint8_t* row = src + static_cast<size_t>(gy < 0 ? 0 : gy) * spitch;
    const bool interior = gy >= 0 && x - rx >= 0 && x + rx < w;
    if (interior) {
      for (int i = x - rx; i <= x + rx; ++i) {
        const int v = __ldg(row + i);
        fine[v * kHistT + t] += delta;
        coarse[(v >> 4) * kHistT + t] += delta;
      }
    } else {
      for (int i = x - rx; i <= x + rx; ++i) {
        const int gx = border_index(i, w, border);
        const int v = (gy < 0 || gx < 0) ? value : __ldg(row + gx);
        fine[v * kHistT + t] += delta;
        coarse[(v >> 4) * kHistT + t] += delta;
      }
    }
  };
  for (int y = y0 - ry; y <= y0 + ry; ++y) add_row(y, 1);
  const int y1 = min(h, y0 + rows_per_thread);
  for (int y = y0; y < y1; ++y) {
    if (y > y0) {
      add_row(y - ry - 1, -1);
      add_row(y + ry, 1);
    }
    int acc = 0, c = 0;
    while (acc + coarse[c * kHistT + t] <= rank) acc += coarse[(c++) * kHistT + t];
    int b = c * 16;
    while (acc + fine[b * kHistT + t] <= rank) acc += fine[(b++) * kHistT + t];
    dst[static_cast<size_t>(y) * dpitch + x] = static_cast<uint8_t>(b);
  }
}

void launch_hist(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h, const MedianParams& p,
                 StreamHandle s) {
  // Rows per thread: long enough to amortise the initial window (n adds) against the
  // per-row cost (2 * window width), short enough to keep every SM busy.
  const int ry = p.ry();
  int rows = 8 * (2 * ry + 1);
  rows = rows < 32 ? 32 : (rows > 128 ? 128 : rows);
  const long long threads = static_cast<long long>((w + kHistT - 1) / kHistT) * kHistT * ((h + rows - 1) / rows);
  while (rows > 16 && threads * 128 / rows < 60000) rows /= 2;  // small frames: more strips
  dim3 grid((w + kHistT - 1) / kHistT, (h + rows - 1) / rows);
  const size_t shmem = (256 + 16) * kHistT * sizeof(uint16_t);
  median_hist_kernel<<<grid, kHistT, shmem, s>>>(src, spitch, dst, dpitch, w, h, p.rx(), ry, p.rank(), p.border,
                                                 p.value, rows);
  VFP_CUDA_LAUNCHED("median_hist_kernel");
}

}  // namespace

bool median_select_supported(const MedianParams& p) {
  const bool shape = (p.rx() <= 3 && p.ry() <= 3) || (p.rx() == 4 && p.ry() == 4);
  return shape && p.rank() == (p.count() - 1) / 2;
}

MedianAlgo median_auto_algo(const MedianParams& p) {
  // Crossover measured on the H100 (docs/median.md): selection wins up to 5x5 and 7x7.
  return median_select_supported(p) ? MedianAlgo::Select : MedianAlgo::Histogram;
}

void median_plane_async(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h, const MedianParams& p,
                        MedianAlgo algo, StreamHandle s) {
  if (algo == MedianAlgo::Auto) algo = median_auto_algo(p);
  if (algo == MedianAlgo::Select && !median_select_supported(p)) algo = MedianAlgo::Histogram;
  if (algo == MedianAlgo::Histogram) return launch_hist(src, spitch, dst, dpitch, w, h, p, s);
  const int rx = p.rx(), ry = p.ry();
// One case per kernel instantiation, in rows:
// clang-format off
#define VFP_SEL(X, Y) \
  if (rx == X && ry == Y) return launch_select<X, Y>(src, spitch, dst, dpitch, w, h, p, s);
  VFP_SEL(1, 1) VFP_SEL(1, 2) VFP_SEL(1, 3) VFP_SEL(2, 1) VFP_SEL(2, 2) VFP_SEL(2, 3)
  VFP_SEL(3, 1) VFP_SEL(3, 2) VFP_SEL(3, 3) VFP_SEL(4, 4)
#undef VFP_SEL
  throw Error(ErrorKind::Internal, "median: no selection kernel for this window");
  // clang-format on
}

}  // namespace vfp::cuda
