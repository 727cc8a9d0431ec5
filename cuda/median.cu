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

// 16-bit samples do not fit fp16 exactly: two of them packed in a 32-bit word, with the
// 16x2 integer min/max.
__device__ __forceinline__ void cswap(unsigned& a, unsigned& b) {
  const unsigned lo = __vminu2(a, b);
  b = __vmaxu2(a, b);
  a = lo;
}

// How each sample type sits in the tile and in a thread's pairs.
template <typename T>
struct SelSamples;
template <>
struct SelSamples<uint8_t> {
  using Tile = __half;
  using Pair = __half2;
  static __device__ __forceinline__ Tile tile(int v) { return __ushort2half_rn(static_cast<unsigned short>(v)); }
  static __device__ __forceinline__ Pair pair(Tile a, Tile b) { return __halves2half2(a, b); }
  static __device__ __forceinline__ uint8_t low(Pair p) {
    return static_cast<uint8_t>(__half2ushort_rn(__low2half(p)));
  }
  static __device__ __forceinline__ uint8_t high(Pair p) {
    return static_cast<uint8_t>(__half2ushort_rn(__high2half(p)));
  }
};
template <>
struct SelSamples<uint16_t> {
  using Tile = uint16_t;
  using Pair = unsigned;
  static __device__ __forceinline__ Tile tile(int v) { return static_cast<uint16_t>(v); }
  static __device__ __forceinline__ Pair pair(Tile a, Tile b) { return a | (static_cast<unsigned>(b) << 16); }
  static __device__ __forceinline__ uint16_t low(Pair p) { return static_cast<uint16_t>(p & 0xFFFFu); }
  static __device__ __forceinline__ uint16_t high(Pair p) { return static_cast<uint16_t>(p >> 16); }
};

template <typename T>
__device__ __forceinline__ const T* row_at(const T* p, size_t pitch_bytes, int y) {
  return reinterpret_cast<const T*>(reinterpret_cast<const uint8_t*>(p) + static_cast<size_t>(y) * pitch_bytes);
}
template <typename T>
__device__ __forceinline__ T* row_at(T* p, size_t pitch_bytes, int y) {
  return reinterpret_cast<T*>(reinterpret_cast<uint8_t*>(p) + static_cast<size_t>(y) * pitch_bytes);
}

// Min to a[0], max to a[size-1] (2*size-3 compare-exchanges).
template <int SIZE, typename P>
__device__ __forceinline__ void minmax_to_ends(P* a) {
#pragma unroll
  for (int i = 1; i < SIZE; ++i) cswap(a[0], a[i]);
#pragma unroll
  for (int i = 1; i < SIZE - 1; ++i) cswap(a[i], a[SIZE - 1]);
}

// Forgetful selection: discards the D smallest and D largest of the S elements load(e)
// and leaves the K = S - 2D middle ones in out[]. The working set starts with D + K + 1
// elements, so whenever its min (max) is dropped, fewer unseen elements remain than
// smaller (larger) ones still to drop: the dropped element cannot be in the middle.
template <int S, int D, typename P, typename Load>
__device__ __forceinline__ void trim(Load load, P* out) {
  constexpr int K = S - 2 * D;
  constexpr int M = D + K + 1;
  static_assert(D >= 1 && M <= S, "trim needs something to drop");
  P a[M];
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
template <int N, typename P, typename Load>
__device__ __forceinline__ P median_of(Load load) {
  P m[1];
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
template <typename T, int RX, int RY>
__global__ void __launch_bounds__(kSelBX* kSelBY)
    median_select_kernel(const T* __restrict__ src, int spitch, T* __restrict__ dst, int dpitch, int w, int h,
                         Border border, int value) {
  using Sam = SelSamples<T>;
  using Pair = typename Sam::Pair;
  constexpr int WX = 2 * RX + 1, WY = 2 * RY + 1, N = WX * WY;
  constexpr int C = (N - 1) / 2;
  constexpr int S = WX * (WY - 1);  // shared by the two pixels of a pair
  constexpr int D = C - WX;         // dropped from each end of the shared part
  constexpr int K = WX + 1;         // kept
  constexpr int OY = kSelRows * kSelBY;
  constexpr int TW = kSelBX + 2 * RX, TH = OY + 2 * RY;
  __shared__ typename Sam::Tile tile[TH][TW + 2];

  const int x0 = blockIdx.x * kSelBX - RX, y0 = blockIdx.y * OY - RY;
  const bool interior = x0 >= 0 && y0 >= 0 && x0 + TW <= w && y0 + TH <= h;
  for (int i = threadIdx.y * kSelBX + threadIdx.x; i < TH * TW; i += kSelBX * kSelBY) {
    const int ty = i / TW, tx = i - ty * TW;
    int v;
    if (interior) {
      v = __ldg(row_at(src, spitch, y0 + ty) + x0 + tx);
    } else {
      const int gy = border_index(y0 + ty, h, border), gx = border_index(x0 + tx, w, border);
      v = (gy < 0 || gx < 0) ? value : __ldg(row_at(src, spitch, gy) + gx);
    }
    tile[ty][tx] = Sam::tile(v);
  }
  __syncthreads();
  const int ox = blockIdx.x * kSelBX + threadIdx.x, oy = blockIdx.y * OY + kSelRows * threadIdx.y;
  if (ox >= w || oy >= h) return;
  const int tx = threadIdx.x, ty = kSelRows * threadIdx.y;  // tile row of P0's top window row

  // Shared element e: pair (P0,P1) uses tile rows ty+1.., pair (P2,P3) rows ty+3..
  Pair mid[K];
  trim<S, D>(
      [&](int e) {
        const int r = e / WX, dx = e - r * WX;
        return Sam::pair(tile[ty + 1 + r][tx + dx], tile[ty + 3 + r][tx + dx]);
      },
      mid);
  // Top pixels (P0, P2): extra row above the shared part; bottom (P1, P3): row below.
  const Pair top = median_of<2 * WX + 1, Pair>(
      [&](int e) { return e < K ? mid[e] : Sam::pair(tile[ty][tx + e - K], tile[ty + 2][tx + e - K]); });
  const Pair bottom = median_of<2 * WX + 1, Pair>(
      [&](int e) { return e < K ? mid[e] : Sam::pair(tile[ty + WY][tx + e - K], tile[ty + 2 + WY][tx + e - K]); });
  row_at(dst, dpitch, oy)[ox] = Sam::low(top);
  if (oy + 1 < h) row_at(dst, dpitch, oy + 1)[ox] = Sam::low(bottom);
  if (oy + 2 < h) row_at(dst, dpitch, oy + 2)[ox] = Sam::high(top);
  if (oy + 3 < h) row_at(dst, dpitch, oy + 3)[ox] = Sam::high(bottom);
}

template <int RX, int RY, typename T>
void launch_select(const T* src, int spitch, T* dst, int dpitch, int w, int h, const MedianParams& p, StreamHandle s) {
  dim3 block(kSelBX, kSelBY);
  dim3 grid((w + kSelBX - 1) / kSelBX, (h + kSelRows * kSelBY - 1) / (kSelRows * kSelBY));
  median_select_kernel<T, RX, RY><<<grid, block, 0, s>>>(src, spitch, dst, dpitch, w, h, p.border, p.value);
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

// 16-bit samples: 65536 bins a thread do not fit, so each thread keeps two 256-bin
// histograms (each with 16 coarse bins): one of the window's upper bytes, which gives the
// answer's upper byte H and its rank r among the window's samples of upper byte H; and one
// of the lower bytes of just those samples, which gives the lower byte. Both slide down the
// strip; the second is rebuilt from the window when H changes from one row to the next
// (rarely in natural images; at every pixel of noise, where the cost is a scan of the
// window). 32 threads a block keep the 34 KB of counters under the default shared memory.
constexpr int kHist16T = 32;

__global__ void __launch_bounds__(kHist16T)
    median_hist16_kernel(const uint16_t* __restrict__ src, int spitch, uint16_t* __restrict__ dst, int dpitch, int w,
                         int h, int rx, int ry, int rank, Border border, int value, int rows_per_thread) {
  extern __shared__ uint16_t hist[];
  constexpr int T = kHist16T;
  uint16_t* upper = hist;               // 256 bins: the sample's upper byte
  uint16_t* upper_c = upper + 256 * T;  // 16: its upper nibble
  uint16_t* lower = upper_c + 16 * T;   // 256: the lower byte, of samples whose upper byte is `cur`
  uint16_t* lower_c = lower + 256 * T;  // 16: its upper nibble
  const int t = threadIdx.x;
  const int x = blockIdx.x * T + t;
  const int y0 = blockIdx.y * rows_per_thread;
  if (x >= w || y0 >= h) return;
  for (int b = 0; b < 256; ++b) upper[b * T + t] = 0;
  for (int b = 0; b < 16; ++b) upper_c[b * T + t] = 0;
  const bool inside_x = x - rx >= 0 && x + rx < w;
  int cur = -1;  // the upper byte the lower histogram counts

  // fn(v) for each sample of window row y.
  auto for_row = [&](int y, auto&& fn) {
    const int gy = border_index(y, h, border);
    const uint16_t* row = row_at(src, spitch, gy < 0 ? 0 : gy);
    if (gy >= 0 && inside_x) {
      for (int i = x - rx; i <= x + rx; ++i) fn(static_cast<int>(__ldg(row + i)));
    } else {
      for (int i = x - rx; i <= x + rx; ++i) {
        const int gx = border_index(i, w, border);
        fn((gy < 0 || gx < 0) ? value : static_cast<int>(__ldg(row + gx)));
      }
    }
  };
  auto count_lower = [&](int v, int delta) {
    lower[(v & 255) * T + t] += delta;
    lower_c[((v >> 4) & 15) * T + t] += delta;
  };
  auto add_row = [&](int y, int delta) {
    for_row(y, [&](int v) {
      upper[(v >> 8) * T + t] += delta;
      upper_c[(v >> 12) * T + t] += delta;
      if ((v >> 8) == cur) count_lower(v, delta);
    });
  };

  for (int y = y0 - ry; y <= y0 + ry; ++y) add_row(y, 1);
  const int y1 = min(h, y0 + rows_per_thread);
  for (int y = y0; y < y1; ++y) {
    if (y > y0) {
      add_row(y - ry - 1, -1);
      add_row(y + ry, 1);
    }
    int acc = 0, c = 0;
    while (acc + upper_c[c * T + t] <= rank) acc += upper_c[(c++) * T + t];
    int hi = c * 16;
    while (acc + upper[hi * T + t] <= rank) acc += upper[(hi++) * T + t];
    if (hi != cur) {  // the lower histogram, rebuilt for this upper byte
      cur = hi;
      for (int b = 0; b < 256; ++b) lower[b * T + t] = 0;
      for (int b = 0; b < 16; ++b) lower_c[b * T + t] = 0;
      for (int wy = y - ry; wy <= y + ry; ++wy)
        for_row(wy, [&](int v) {
          if ((v >> 8) == cur) count_lower(v, 1);
        });
    }
    int r = rank - acc;
    c = 0;
    while (r >= lower_c[c * T + t]) r -= lower_c[(c++) * T + t];
    int lo = c * 16;
    while (r >= lower[lo * T + t]) r -= lower[(lo++) * T + t];
    row_at(dst, dpitch, y)[x] = static_cast<uint16_t>((hi << 8) | lo);
  }
}

// Rows a thread: long enough to amortise the initial window (n adds) against the per-row
// cost (2 * window width), short enough to keep every SM busy.
int hist_rows(int w, int h, int ry) {
  int rows = 8 * (2 * ry + 1);
  rows = rows < 32 ? 32 : (rows > 128 ? 128 : rows);
  const long long threads = static_cast<long long>((w + kHistT - 1) / kHistT) * kHistT * ((h + rows - 1) / rows);
  while (rows > 16 && threads * 128 / rows < 60000) rows /= 2;  // small frames: more strips
  return rows;
}

void launch_hist(const uint16_t* src, int spitch, uint16_t* dst, int dpitch, int w, int h, const MedianParams& p,
                 StreamHandle s) {
  const int rows = hist_rows(w, h, p.ry());
  dim3 grid((w + kHist16T - 1) / kHist16T, (h + rows - 1) / rows);
  const size_t shmem = 2 * (256 + 16) * kHist16T * sizeof(uint16_t);
  median_hist16_kernel<<<grid, kHist16T, shmem, s>>>(src, spitch, dst, dpitch, w, h, p.rx(), p.ry(), p.rank(), p.border,
                                                     p.value, rows);
  VFP_CUDA_LAUNCHED("median_hist16_kernel");
}

void launch_hist(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h, const MedianParams& p,
                 StreamHandle s) {
  const int ry = p.ry();
  const int rows = hist_rows(w, h, ry);
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

namespace {
template <typename T>
void median_plane(const T* src, int spitch, T* dst, int dpitch, int w, int h, const MedianParams& p, MedianAlgo algo,
                  StreamHandle s) {
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
}  // namespace

void median_plane_async(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h, const MedianParams& p,
                        MedianAlgo algo, StreamHandle s) {
  median_plane(src, spitch, dst, dpitch, w, h, p, algo, s);
}
void median_plane_async(const uint16_t* src, int spitch, uint16_t* dst, int dpitch, int w, int h, const MedianParams& p,
                        MedianAlgo algo, StreamHandle s) {
  median_plane(src, spitch, dst, dpitch, w, h, p, algo, s);
}

}  // namespace vfp::cuda
