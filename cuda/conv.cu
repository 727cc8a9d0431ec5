#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>

#include "core/error.hpp"
#include "core/log.hpp"
#include "cuda/conv.hpp"

namespace vfp::cuda {

namespace {

constexpr int kBankFloats = 1024;  // 31x31 = 961 taps; separable: row at 0, column at 32
constexpr int kColOffset = 32;

__constant__ float c_taps[kConvBanks][kBankFloats];

std::mutex g_bank_mu;
std::atomic<bool> g_programmatic_launch{true};
// Constant memory is per device: so are the banks in use.
std::map<int, std::array<bool, kConvBanks>> g_bank_used;

constexpr int kBX = 32, kPX = 4, kPY = 4;  // threads across; each thread 4x4 pixels
constexpr int kOW = kBX * kPX;             // 128 outputs wide
// Thread rows of a block for kernel width KW: 4 (16 output rows) for small kernels, whose
// blocks are short-lived and many (finer tail, ~10% faster at 3x3 and 5x5 than 8), 8 (32
// output rows) from 9 up, where the apron of KH - 1 extra rows is the larger cost.
template <int KW>
constexpr int block_rows() {
  return KW <= 7 ? 4 : 8;
}
constexpr int kMaxOH = 8 * kPY;  // tallest block, in output rows
// Resident blocks asked of the compiler: small kernels fit in 32 registers, 16 blocks of
// 128 threads per SM (the full 2048 threads), where the edge fill would otherwise take 40
// and cost a quarter of the warps. 0 (no minimum) for larger ones: capping them spills,
// and even a minimum of 1 changes ptxas's allocation (31x31: 70 registers instead of 58,
// one block fewer per SM).
template <int KW>
constexpr int min_blocks() {
  return KW <= 7 ? 16 : 0;
}

// Tile geometry for kernel width KW. The tile starts kOff columns left of the block's
// first window column, so that its columns line up with the source's 4-byte words: an
// interior tile is filled with one aligned 32-bit load and one float4 shared store per four
// samples, with no per-sample bounds tests.
template <int KW>
struct TileGeom {
  static constexpr int kOff = ((KW / 2 + 3) & ~3) - KW / 2;  // x0 - kOff is 4-aligned
  static constexpr int TW = kOW + KW - 1;                    // window columns the block reads
  static constexpr int words = (TW + kOff + 3) / 4;          // 4-sample words per tile row
  static constexpr int pitch = 4 * words;                    // floats per tile row
};

// Converts byte b (0..3) of a word to float without the conversion unit (a quarter-rate
// pipe on the SM): 0x4B0000bb is the float 2^23 + bb, exactly.
template <int B>
__device__ __forceinline__ float byte_as_float(uint32_t word) {
  return __uint_as_float(__byte_perm(word, 0x4B000000u, 0x7650 | B)) - 8388608.f;
}

// Whether the plane's rows can be read as aligned 4-byte words.
__device__ __forceinline__ bool words_aligned(const uint8_t* src, int spitch) {
  return ((static_cast<uintptr_t>(spitch) | reinterpret_cast<uintptr_t>(src)) & 3) == 0;
}

// Whether the tile of `rows` rows starting at (x0, y0) lies inside the plane as whole,
// aligned 4-byte words (the word loads need no border rule and no per-sample test).
template <int KW>
__device__ __forceinline__ bool aligned_interior(const uint8_t* src, int spitch, int w, int h, int x0, int y0,
                                                 int rows) {
  const int xa = x0 - TileGeom<KW>::kOff;
  return xa >= 0 && y0 >= 0 && xa + TileGeom<KW>::pitch <= w && y0 + rows <= h && words_aligned(src, spitch);
}

// Each thread issues kLoadBatch global loads before it converts and stores any of them,
// so that its loads overlap (the other resident blocks hide most of that latency anyway).
constexpr int kLoadBatch = 8;

// Tiles at the frame's edge (or in an unaligned plane) first evaluate the border rule,
// which has divisions in it, once per tile column and row into shared tables: s_col[t] =
// source column of tile column t (xa + t under the rule), s_row[r] = byte offset of tile
// row r's source row; -1 in either: the constant. One call site per table, not unrolled
// (inlined per word, the rule made the kernels too large for the instruction cache).
template <int KW>
__device__ __forceinline__ void build_border_tables(int* s_col, int* s_row, int rows, int xa, int y0, int w, int h,
                                                    int spitch, Border border) {
  constexpr int kThreads = kBX * block_rows<KW>();
  const int tid = threadIdx.y * kBX + threadIdx.x;
#pragma unroll 1
  for (int c = tid; c < 4 * TileGeom<KW>::words; c += kThreads) s_col[c] = border_index(xa + c, w, border);
#pragma unroll 1
  for (int r = tid; r < rows; r += kThreads) {
    const int gy = border_index(y0 + r, h, border);
    s_row[r] = gy < 0 ? -1 : gy * spitch;
  }
  __syncthreads();
}

// Tile word wd of tile row r (tile columns 4 wd .. 4 wd + 3) of an edge tile: one whole-word
// load where it lies inside the plane, bytes through the column table elsewhere.
__device__ __forceinline__ uint32_t edge_word(const uint8_t* __restrict__ src, const int* s_col, const int* s_row,
                                              int r, int wd, int xa, int w, bool aligned, int value) {
  const int ro = s_row[r], xs = xa + 4 * wd;
  if (ro < 0) return static_cast<uint32_t>(value) * 0x01010101u;  // a constant-border row
  if (aligned && xs >= 0 && xs + 4 <= w) return __ldg(reinterpret_cast<const uint32_t*>(src + ro + xs));
  uint32_t v = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int c = s_col[4 * wd + j];
    v |= static_cast<uint32_t>(c < 0 ? value : __ldg(src + ro + c)) << (8 * j);
  }
  return v;
}

__device__ __forceinline__ float4 word_as_float4(uint32_t v) {
  return make_float4(byte_as_float<0>(v), byte_as_float<1>(v), byte_as_float<2>(v), byte_as_float<3>(v));
}

// Loads rows [y0, y0+rows) x columns [x0, x0+TW) as floats, border applied; source column
// x0 + c lands in tile column c + kOff.
template <int KW>
__device__ void load_tile(float* tile, const uint8_t* __restrict__ src, int spitch, int w, int h, int x0, int y0,
                          int rows, Border border, int value) {
  using G = TileGeom<KW>;
  constexpr int kThreads = kBX * block_rows<KW>();
  const int tid = threadIdx.y * kBX + threadIdx.x;
  const int xa = x0 - G::kOff;
  if (aligned_interior<KW>(src, spitch, w, h, x0, y0, rows)) {
    const int total = rows * G::words;
    // Word i = r * words + wd of the tile lies at byte offset r * spitch + 4 * wd from the
    // tile's origin; each trip of a thread advances i by kThreads, and the offset is
    // advanced incrementally (a division and 64-bit address arithmetic per load cost more
    // than the rest of the tile load together).
    constexpr int kStepR = kThreads / G::words, kStepW = kThreads % G::words;
    int wd = tid % G::words;
    int off = tid / G::words * spitch + 4 * wd;
    const int step = kStepR * spitch + 4 * kStepW, wrap = spitch - 4 * G::words;
    const uint8_t* origin = src + static_cast<size_t>(y0) * spitch + xa;
    for (int base = tid; base < total; base += kThreads * kLoadBatch) {
      uint32_t v[kLoadBatch];
#pragma unroll
      for (int u = 0; u < kLoadBatch; ++u) {
        v[u] = base + u * kThreads < total ? __ldg(reinterpret_cast<const uint32_t*>(origin + off)) : 0u;
        wd += kStepW;
        off += step;
        if (wd >= G::words) wd -= G::words, off += wrap;
      }
#pragma unroll
      for (int u = 0; u < kLoadBatch; ++u) {
        const int i = base + u * kThreads;
        if (i >= total) break;
        reinterpret_cast<float4*>(tile)[i] = word_as_float4(v[u]);
      }
    }
    return;
  }
  // Blocks at the frame's edges (and unaligned planes): the border tables, then the same
  // walk over the tile's words as above, each word through edge_word (the per-sample loads
  // this replaced made the edge blocks several times slower than the rest, and the last
  // row of blocks, scheduled last, the kernel's tail).
  __shared__ int s_col[4 * G::words], s_row[kMaxOH + kConvMaxSize - 1];
  build_border_tables<KW>(s_col, s_row, rows, xa, y0, w, h, spitch, border);
  const bool aligned = words_aligned(src, spitch);
  const int total = rows * G::words;
  constexpr int kStepR = kThreads / G::words, kStepW = kThreads % G::words;
  int r = tid / G::words, wd = tid % G::words;
  for (int base = tid; base < total; base += kThreads * kLoadBatch) {
    uint32_t v[kLoadBatch];
#pragma unroll
    for (int u = 0; u < kLoadBatch; ++u) {
      v[u] = base + u * kThreads < total ? edge_word(src, s_col, s_row, r, wd, xa, w, aligned, value) : 0u;
      wd += kStepW;
      r += kStepR;
      if (wd >= G::words) wd -= G::words, ++r;
    }
#pragma unroll
    for (int u = 0; u < kLoadBatch; ++u) {
      const int i = base + u * kThreads;
      if (i >= total) break;
      reinterpret_cast<float4*>(tile)[i] = word_as_float4(v[u]);
    }
  }
}

// Tiles of a compile-time height ROWS: warp y fills tile rows y, y + BY, ... with one word
// per lane (tile words 0..31 of the row), and the words past 32 (two for kernels up to 9
// wide) are spread over the block. Every load is issued before any store. Interior tiles
// (all but the frame's outermost blocks) load aligned words with no test; edge tiles go
// through the border tables and edge_word.
template <int KW, int ROWS, bool EDGE>
__device__ __forceinline__ void fill_tile_rows(float* tile, const uint8_t* __restrict__ src, int spitch, int w, int h,
                                               int x0, int y0, bool aligned, Border border, int value) {
  using G = TileGeom<KW>;
  constexpr int BY = block_rows<KW>(), kThreads = kBX * BY, kExtra = G::words - kBX;
  static_assert(kExtra >= 0, "tile rows are at least one warp of words wide");
  const int lane = threadIdx.x, warp = threadIdx.y, tid = warp * kBX + lane;
  // The block shape is fixed by the launch; telling the compiler drops the row tests.
  __builtin_assume(lane < kBX);
  __builtin_assume(warp < BY);
  const int xa = x0 - G::kOff;
  // (kE: kExtra as a divisor; the extra-word loops are empty when kExtra is 0.)
  constexpr int kE = kExtra > 0 ? kExtra : 1;
  constexpr int kRowsPerWarp = (ROWS + BY - 1) / BY, kExtraPasses = (ROWS * kExtra + kThreads - 1) / kThreads;
  uint32_t v[kRowsPerWarp], e[kExtraPasses > 0 ? kExtraPasses : 1];
  if constexpr (!EDGE) {
    // 32-bit offsets from the tile's origin: one add per load, no 64-bit arithmetic.
    const uint8_t* origin = src + static_cast<size_t>(y0) * spitch + xa;
    const int row_step = BY * spitch;
    int off = warp * spitch + 4 * lane;
#pragma unroll
    for (int k = 0; k < kRowsPerWarp; ++k, off += row_step)
      if (warp + k * BY < ROWS) v[k] = __ldg(reinterpret_cast<const uint32_t*>(origin + off));
#pragma unroll
    for (int q = 0; q < kExtraPasses; ++q) {
      const int i = tid + q * kThreads;
      if (i < ROWS * kExtra)
        e[q] = __ldg(reinterpret_cast<const uint32_t*>(origin + i / kE * spitch + 4 * (kBX + i % kE)));
    }
  } else {
    __shared__ int s_col[4 * G::words], s_row[ROWS];
    build_border_tables<KW>(s_col, s_row, ROWS, xa, y0, w, h, spitch, border);
#pragma unroll
    for (int k = 0; k < kRowsPerWarp; ++k)
      if (warp + k * BY < ROWS) v[k] = edge_word(src, s_col, s_row, warp + k * BY, lane, xa, w, aligned, value);
#pragma unroll
    for (int q = 0; q < kExtraPasses; ++q) {
      const int i = tid + q * kThreads;
      if (i < ROWS * kExtra) e[q] = edge_word(src, s_col, s_row, i / kE, kBX + i % kE, xa, w, aligned, value);
    }
  }
  float4* t4 = reinterpret_cast<float4*>(tile);
#pragma unroll
  for (int k = 0; k < kRowsPerWarp; ++k)
    if (warp + k * BY < ROWS) t4[(warp + k * BY) * G::words + lane] = word_as_float4(v[k]);
#pragma unroll
  for (int q = 0; q < kExtraPasses; ++q) {
    const int i = tid + q * kThreads;
    if (i < ROWS * kExtra) t4[i / kE * G::words + kBX + i % kE] = word_as_float4(e[q]);
  }
}

// The block's tile of `rows` rows at (x0, y0): fill_tile_rows for compile-time heights
// (KHC > 0), load_tile's batched word walk for runtime heights.
template <int KW, int KHC>
__device__ __forceinline__ void fill_tile(float* tile, const uint8_t* __restrict__ src, int spitch, int w, int h,
                                          int x0, int y0, int rows, Border border, int value) {
  if constexpr (KHC > 0) {
    constexpr int ROWS = block_rows<KW>() * kPY + KHC - 1;
    if (aligned_interior<KW>(src, spitch, w, h, x0, y0, ROWS)) {
      fill_tile_rows<KW, ROWS, false>(tile, src, spitch, w, h, x0, y0, true, border, value);
    } else {
      fill_tile_rows<KW, ROWS, true>(tile, src, spitch, w, h, x0, y0, words_aligned(src, spitch), border, value);
    }
  } else {
    load_tile<KW>(tile, src, spitch, w, h, x0, y0, rows, border, value);
  }
}

// r[0 .. KW+2] = tile columns [kOff, kOff + KW + 3) of `row` (16-byte aligned), read
// with aligned float4 loads.
template <int KW>
__device__ __forceinline__ void load_window(const float* row, float* r) {
  constexpr int kOff = TileGeom<KW>::kOff, N = KW + 3;
#pragma unroll
  for (int m = 0; m < (kOff + N + 3) / 4; ++m) {
    const float4 v = *reinterpret_cast<const float4*>(row + 4 * m);
    const float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int idx = 4 * m + k - kOff;
      if (idx >= 0 && idx < N) r[idx] = e[k];
    }
  }
}

// The CPU reference's rounding, clamp(floor(fmaf(acc, rdiv, bias + 0.5)), 0, 255), as one
// saturating round-down conversion to u8 (F2I.U8.FLOOR): clamping before or after the floor
// gives the same value because 0 and 255 are integers, and NaN converts to 0 as the
// reference's clamp does. `bias_half` is bias + 0.5 (rounded to float once, on the host).
// Returns the byte in the low bits and zeros above (a 32-bit destination: no masking).
__device__ __forceinline__ uint32_t finish_bits(float acc, float rdiv, float bias_half) {
  uint32_t b;
  asm("cvt.rmi.sat.u8.f32 %0, %1;" : "=r"(b) : "f"(fmaf(acc, rdiv, bias_half)));
  return b;
}

// The four 8-bit results of a thread's output row, packed into one word (byte j = acc[j]).
__device__ __forceinline__ uint32_t pack4(const float* acc, float rdiv, float bias_half) {
  const uint32_t b0 = finish_bits(acc[0], rdiv, bias_half), b1 = finish_bits(acc[1], rdiv, bias_half);
  const uint32_t b2 = finish_bits(acc[2], rdiv, bias_half), b3 = finish_bits(acc[3], rdiv, bias_half);
  return __byte_perm(__byte_perm(b0, b1, 0x0040), __byte_perm(b2, b3, 0x0040), 0x5410);
}

__device__ __forceinline__ void store4(uint8_t* dst, int dpitch, int w, int h, int x, int y, const float* acc,
                                       float rdiv, float bias_half) {
  if (y >= h) return;
  uint8_t* d = dst + static_cast<size_t>(y) * dpitch;
  const uint32_t v = pack4(acc, rdiv, bias_half);
  if (x + kPX <= w && ((reinterpret_cast<uintptr_t>(d + x) & 3) == 0)) {  // one 32-bit store
    *reinterpret_cast<uint32_t*>(d + x) = v;
    return;
  }
#pragma unroll
  for (int j = 0; j < kPX; ++j)
    if (x + j < w) d[x + j] = static_cast<uint8_t>(v >> (8 * j));
}

// Stores a thread's kPY x kPX outputs at (ox, oy). Blocks wholly inside an aligned plane
// (all but the last column and row of blocks) store without per-row tests.
template <int OH>
__device__ __forceinline__ void store_outputs(uint8_t* dst, int dpitch, int w, int h, int ox, int oy,
                                              const float (&acc)[kPY][kPX], float rdiv, float bias_half) {
  const bool whole = (blockIdx.x + 1) * kOW <= w && (blockIdx.y + 1) * OH <= h && words_aligned(dst, dpitch);
  if (whole) {
    uint8_t* d = dst + static_cast<size_t>(oy) * dpitch + ox;
#pragma unroll
    for (int j = 0; j < kPY; ++j) *reinterpret_cast<uint32_t*>(d + j * dpitch) = pack4(acc[j], rdiv, bias_half);
    return;
  }
#pragma unroll
  for (int j = 0; j < kPY; ++j) store4(dst, dpitch, w, h, ox, oy + j, acc[j], rdiv, bias_half);
}

// Programmatic dependent launch (sm_90+; launch() sets the stream attribute there). The
// next kernel on the stream may be scheduled while this grid's last blocks run, and this
// grid's blocks may be resident before the previous kernel ends: each waits here until
// the previous grid has completed and its writes are visible, so only the launch latency
// (about 1 us between back-to-back kernels on the H100) is overlapped, never the data.
__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// 2-D: the CPU reference's order exactly (ky outer, kx inner, fmaf). Each thread computes
// 4x4 outputs; every window row it loads from shared memory (4 + KW - 1 floats, aligned
// float4 loads) feeds the up to four output rows that use it, each with its own ky.
// KHC > 0: the kernel height is that compile-time constant (small square kernels, where
// loop and index overhead, not arithmetic, set the speed); 0: runtime `kh_arg`.
template <int KW, int KHC>
__global__ void __launch_bounds__(kBX* block_rows<KW>(), min_blocks<KW>())
    conv2d_kernel(const uint8_t* __restrict__ src, int spitch, uint8_t* __restrict__ dst, int dpitch, int w, int h,
                  int kh_arg, int bank, float rdiv, float bias_half, Border border, int value) {
  wait_for_previous_grid();
  const int kh = KHC > 0 ? KHC : kh_arg;
  extern __shared__ float4 smem4[];
  float* tile = reinterpret_cast<float*>(smem4);
  constexpr int TP = TileGeom<KW>::pitch;
  constexpr int kOH = block_rows<KW>() * kPY;
  const int x0 = blockIdx.x * kOW - KW / 2, y0 = blockIdx.y * kOH - kh / 2;
  fill_tile<KW, KHC>(tile, src, spitch, w, h, x0, y0, kOH + kh - 1, border, value);
  __syncthreads();
  const float* taps = c_taps[bank];
  float acc[kPY][kPX] = {};
  const int ty = kPY * threadIdx.y;
#pragma unroll(KHC > 0 ? KHC + kPY - 1 : 1)
  for (int r = 0; r < kh + kPY - 1; ++r) {
    float win[KW + 3];
    load_window<KW>(tile + (ty + r) * TP + kPX * threadIdx.x, win);
#pragma unroll
    for (int j = 0; j < kPY; ++j) {
      const int ky = r - j;  // output row j uses this tile row as its kernel row ky
      if (ky < 0 || ky >= kh) continue;
#pragma unroll
      for (int kx = 0; kx < KW; ++kx) {
        const float t = taps[ky * KW + kx];
#pragma unroll
        for (int i = 0; i < kPX; ++i) acc[j][i] = fmaf(t, win[i + kx], acc[j][i]);
      }
    }
  }
  const int ox = blockIdx.x * kOW + kPX * threadIdx.x, oy = blockIdx.y * kOH + ty;
  store_outputs<kOH>(dst, dpitch, w, h, ox, oy, acc, rdiv, bias_half);
}

// Separable, fused: horizontal pass of every tile row into shared memory, then the
// vertical pass from there. Global traffic stays one read and one write of the frame.
// KHC > 0: the kernel height is that compile-time constant (square kernels up to 7x7),
// which unrolls both passes; 0: runtime `kh_arg`.
template <int KW, int KHC>
__global__ void __launch_bounds__(kBX* block_rows<KW>(), min_blocks<KW>())
    conv_sep_kernel(const uint8_t* __restrict__ src, int spitch, uint8_t* __restrict__ dst, int dpitch, int w, int h,
                    int kh_arg, int bank, float rdiv, float bias_half, Border border, int value) {
  wait_for_previous_grid();
  const int kh = KHC > 0 ? KHC : kh_arg;
  extern __shared__ float4 smem4[];
  float* tile = reinterpret_cast<float*>(smem4);
  constexpr int TP = TileGeom<KW>::pitch;
  constexpr int kBY = block_rows<KW>(), kOH = kBY * kPY;
  const int rows = kOH + kh - 1;
  float* hp = tile + rows * TP;  // horizontal results: rows x kOW
  const int x0 = blockIdx.x * kOW - KW / 2, y0 = blockIdx.y * kOH - kh / 2;
  fill_tile<KW, KHC>(tile, src, spitch, w, h, x0, y0, rows, border, value);
  __syncthreads();
  const float* taps = c_taps[bank];
#pragma unroll(KHC > 0 ? (kOH + KHC - 1 + kBY - 1) / kBY : 1)
  for (int r0 = threadIdx.y; r0 < rows; r0 += kBY) {
    float win[KW + 3];
    load_window<KW>(tile + r0 * TP + kPX * threadIdx.x, win);
    float acc[kPX] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int kx = 0; kx < KW; ++kx) {
      const float t = taps[kx];
#pragma unroll
      for (int i = 0; i < kPX; ++i) acc[i] = fmaf(t, win[i + kx], acc[i]);
    }
    *reinterpret_cast<float4*>(hp + r0 * kOW + kPX * threadIdx.x) = make_float4(acc[0], acc[1], acc[2], acc[3]);
  }
  __syncthreads();
  float acc[kPY][kPX] = {};
  const int ty = kPY * threadIdx.y;
#pragma unroll(KHC > 0 ? KHC + kPY - 1 : 1)
  for (int r = 0; r < kh + kPY - 1; ++r) {
    const float4 v = *reinterpret_cast<const float4*>(hp + (ty + r) * kOW + kPX * threadIdx.x);
#pragma unroll
    for (int j = 0; j < kPY; ++j) {
      const int ky = r - j;
      if (ky < 0 || ky >= kh) continue;
      const float t = taps[kColOffset + ky];
      acc[j][0] = fmaf(t, v.x, acc[j][0]);
      acc[j][1] = fmaf(t, v.y, acc[j][1]);
      acc[j][2] = fmaf(t, v.z, acc[j][2]);
      acc[j][3] = fmaf(t, v.w, acc[j][3]);
    }
  }
  const int ox = blockIdx.x * kOW + kPX * threadIdx.x, oy = blockIdx.y * kOH + ty;
  store_outputs<kOH>(dst, dpitch, w, h, ox, oy, acc, rdiv, bias_half);
}

using KernelFn = void (*)(const uint8_t*, int, uint8_t*, int, int, int, int, int, float, float, Border, int);

template <int KW>
void launch(bool separable, const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h, int kh, int bank,
            float rdiv, float bias_half, Border border, int value, StreamHandle s) {
  constexpr int kBY = block_rows<KW>(), kOH = kBY * kPY;
  const int rows = kOH + kh - 1;
  size_t shmem = static_cast<size_t>(rows) * TileGeom<KW>::pitch * sizeof(float);
  if (separable) shmem += static_cast<size_t>(rows) * kOW * sizeof(float);
  // Square kernels up to 7x7 get the height at compile time too.
  constexpr int kFixedH = KW <= 7 ? KW : 0;
  const bool fixed = kh == KW && KW <= 7;
  KernelFn fn = separable ? (fixed ? conv_sep_kernel<KW, kFixedH> : conv_sep_kernel<KW, 0>)
                          : (fixed ? conv2d_kernel<KW, kFixedH> : conv2d_kernel<KW, 0>);
  static std::once_flag once[4];
  std::call_once(once[(separable ? 2 : 0) + (fixed ? 1 : 0)], [&] {
    VFP_CUDA(cudaFuncSetAttribute(reinterpret_cast<const void*>(fn), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  96 * 1024));
  });
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((w + kOW - 1) / kOW, (h + kOH - 1) / kOH);
  cfg.blockDim = dim3(kBX, kBY);
  cfg.dynamicSmemBytes = shmem;
  cfg.stream = s;
  cudaLaunchAttribute pdl[1] = {};
  pdl[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = pdl;
  // Programmatic launch for the compile-time-height kernels only: their blocks are short
  // and many, and hiding the launch gap took 1.1-1.3 us off each call (4K 3x3 12.3 -> 11.2,
  // 5x5 16.1 -> 15.0 on the H100). The larger kernels gained nothing at 4K and lost 5-17%
  // at 1080p, where the grid is one wave and the next grid's blocks, placed early into the
  // slots left free, unbalance it.
  cfg.numAttrs = fixed && g_programmatic_launch.load(std::memory_order_relaxed) && probe().cc_major >= 9 ? 1 : 0;
  VFP_CUDA(cudaLaunchKernelEx(&cfg, fn, src, spitch, dst, dpitch, w, h, kh, bank, rdiv, bias_half, border, value));
  VFP_CUDA_LAUNCHED(separable ? "conv_sep_kernel" : "conv2d_kernel");
}

void dispatch(int kw, bool separable, const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h, int kh,
              int bank, float rdiv, float bias_half, Border border, int value, StreamHandle s) {
  switch (kw) {
// One case per kernel instantiation, in rows:
// clang-format off
#define VFP_KW(K) \
  case K: return launch<K>(separable, src, spitch, dst, dpitch, w, h, kh, bank, rdiv, bias_half, border, value, s);
    VFP_KW(1) VFP_KW(3) VFP_KW(5) VFP_KW(7) VFP_KW(9) VFP_KW(11) VFP_KW(13) VFP_KW(15)
    VFP_KW(17) VFP_KW(19) VFP_KW(21) VFP_KW(23) VFP_KW(25) VFP_KW(27) VFP_KW(29) VFP_KW(31)
#undef VFP_KW
  }
  throw Error(ErrorKind::Internal, log::format("conv: no kernel for width %d", kw));
  // clang-format on
}

// ------------------------------------------------------------------ 16-bit samples
// Plainer kernels: a thread an output, 32x8 threads a block, the block's window in shared
// memory as floats (border applied while loading). The arithmetic is the CPU reference's,
// in its order; only the speed differs from the 8-bit kernels.
constexpr int k16X = 32, k16Y = 8;

__device__ __forceinline__ uint16_t finish16(float acc, float rdiv, float bias_half) {
  const float v = floorf(fmaf(acc, rdiv, bias_half));
  return static_cast<uint16_t>(v >= 0.f ? (v > 65535.f ? 65535.f : v) : 0.f);
}

__device__ __forceinline__ float sample16(const uint16_t* src, int spitch, int w, int h, int x, int y, Border border,
                                          int value) {
  const int gx = border_index(x, w, border), gy = border_index(y, h, border);
  if (gx < 0 || gy < 0) return static_cast<float>(value);
  return static_cast<float>(__ldg(
      reinterpret_cast<const uint16_t*>(reinterpret_cast<const uint8_t*>(src) + static_cast<size_t>(gy) * spitch) +
      gx));
}

// The (k16X + kw - 1) x (rows) window of samples from (x0, y0) into `tile`.
__device__ __forceinline__ void fill_tile16(float* tile, int tp, const uint16_t* src, int spitch, int w, int h, int x0,
                                            int y0, int rows, Border border, int value) {
  const int n = tp * rows, t = threadIdx.y * k16X + threadIdx.x;
  for (int i = t; i < n; i += k16X * k16Y) {
    const int r = i / tp, c = i - r * tp;
    tile[i] = sample16(src, spitch, w, h, x0 + c, y0 + r, border, value);
  }
}

__global__ void __launch_bounds__(k16X* k16Y)
    conv2d16_kernel(const uint16_t* __restrict__ src, int spitch, uint16_t* __restrict__ dst, int dpitch, int w, int h,
                    int kw, int kh, int bank, float rdiv, float bias_half, Border border, int value) {
  extern __shared__ float tile16[];
  const int tp = k16X + kw - 1;
  const int x0 = blockIdx.x * k16X - kw / 2, y0 = blockIdx.y * k16Y - kh / 2;
  fill_tile16(tile16, tp, src, spitch, w, h, x0, y0, k16Y + kh - 1, border, value);
  __syncthreads();
  const int x = blockIdx.x * k16X + threadIdx.x, y = blockIdx.y * k16Y + threadIdx.y;
  if (x >= w || y >= h) return;
  const float* taps = c_taps[bank];
  float acc = 0.f;
  for (int ky = 0; ky < kh; ++ky) {
    const float* row = tile16 + (threadIdx.y + ky) * tp + threadIdx.x;
    for (int kx = 0; kx < kw; ++kx) acc = fmaf(taps[ky * kw + kx], row[kx], acc);
  }
  reinterpret_cast<uint16_t*>(reinterpret_cast<uint8_t*>(dst) + static_cast<size_t>(y) * dpitch)[x] =
      finish16(acc, rdiv, bias_half);
}

// Separable: the horizontal pass of every window row into shared memory, then the vertical.
__global__ void __launch_bounds__(k16X* k16Y)
    conv_sep16_kernel(const uint16_t* __restrict__ src, int spitch, uint16_t* __restrict__ dst, int dpitch, int w,
                      int h, int kw, int kh, int bank, float rdiv, float bias_half, Border border, int value) {
  extern __shared__ float tile16[];
  const int tp = k16X + kw - 1, rows = k16Y + kh - 1;
  float* hp = tile16 + tp * rows;  // rows x k16X horizontal results
  const int x0 = blockIdx.x * k16X - kw / 2, y0 = blockIdx.y * k16Y - kh / 2;
  fill_tile16(tile16, tp, src, spitch, w, h, x0, y0, rows, border, value);
  __syncthreads();
  const float* taps = c_taps[bank];
  for (int r = threadIdx.y; r < rows; r += k16Y) {
    const float* row = tile16 + r * tp + threadIdx.x;
    float acc = 0.f;
    for (int kx = 0; kx < kw; ++kx) acc = fmaf(taps[kx], row[kx], acc);
    hp[r * k16X + threadIdx.x] = acc;
  }
  __syncthreads();
  const int x = blockIdx.x * k16X + threadIdx.x, y = blockIdx.y * k16Y + threadIdx.y;
  if (x >= w || y >= h) return;
  float acc = 0.f;
  for (int ky = 0; ky < kh; ++ky) acc = fmaf(taps[kColOffset + ky], hp[(threadIdx.y + ky) * k16X + threadIdx.x], acc);
  reinterpret_cast<uint16_t*>(reinterpret_cast<uint8_t*>(dst) + static_cast<size_t>(y) * dpitch)[x] =
      finish16(acc, rdiv, bias_half);
}

void dispatch16(int kw, bool separable, const uint16_t* src, int spitch, uint16_t* dst, int dpitch, int w, int h,
                int kh, int bank, float rdiv, float bias_half, Border border, int value, StreamHandle s) {
  const int rows = k16Y + kh - 1;
  size_t shmem = static_cast<size_t>(rows) * (k16X + kw - 1) * sizeof(float);  // 31x31: 9.5 KB
  if (separable) shmem += static_cast<size_t>(rows) * k16X * sizeof(float);
  const dim3 grid((w + k16X - 1) / k16X, (h + k16Y - 1) / k16Y), block(k16X, k16Y);
  if (separable)
    conv_sep16_kernel<<<grid, block, shmem, s>>>(src, spitch, dst, dpitch, w, h, kw, kh, bank, rdiv, bias_half, border,
                                                 value);
  else
    conv2d16_kernel<<<grid, block, shmem, s>>>(src, spitch, dst, dpitch, w, h, kw, kh, bank, rdiv, bias_half, border,
                                               value);
  VFP_CUDA_LAUNCHED(separable ? "conv_sep16_kernel" : "conv2d16_kernel");
}

}  // namespace

ConvTaps::ConvTaps(int slots) : device_(current_device()) {
  std::lock_guard<std::mutex> lk(g_bank_mu);
  auto& used = g_bank_used[device_];
  for (int b = 0; b < kConvBanks && static_cast<int>(banks_.size()) < slots; ++b)
    if (!used[static_cast<size_t>(b)]) banks_.push_back(b);
  if (static_cast<int>(banks_.size()) < slots) {
    banks_.clear();
    throw Error(ErrorKind::Usage, log::format("conv: out of constant-memory banks (%d in all, one per conv stage and "
                                              "frame in flight, on each GPU); use fewer conv stages or pipelines "
                                              "per GPU, or a smaller --depth",
                                              kConvBanks));
  }
  for (int b : banks_) used[static_cast<size_t>(b)] = true;
  versions_.assign(banks_.size(), 0);
  params_.resize(banks_.size());
  separable_.assign(banks_.size(), 0);
}

ConvTaps::~ConvTaps() {
  std::lock_guard<std::mutex> lk(g_bank_mu);
  for (int b : banks_) g_bank_used[device_][static_cast<size_t>(b)] = false;
}

void ConvTaps::use(const ConvParams& p, bool separable, uint64_t version, int slot, StreamHandle s) {
  const size_t i = static_cast<size_t>(slot) % banks_.size();
  if (versions_[i] == version) return;
  std::vector<float> host(kBankFloats, 0.f);
  const ConvKernel& k = p.kernel;
  if (separable) {
    std::copy(k.row.begin(), k.row.end(), host.begin());
    std::copy(k.col.begin(), k.col.end(), host.begin() + kColOffset);
  } else {
    std::copy(k.taps.begin(), k.taps.end(), host.begin());
  }
  // Pageable source: copied to a staging buffer before the call returns, then written to
  // the bank in stream order (after the bank's previous frame, before this one).
  VFP_CUDA(cudaMemcpyToSymbolAsync(c_taps, host.data(), kBankFloats * sizeof(float),
                                   static_cast<size_t>(banks_[i]) * kBankFloats * sizeof(float), cudaMemcpyHostToDevice,
                                   s));
  versions_[i] = version;
  params_[i] = p;
  separable_[i] = separable ? 1 : 0;
}

void ConvTaps::run(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h, int slot,
                   StreamHandle s) const {
  const size_t i = static_cast<size_t>(slot) % banks_.size();
  const ConvParams& p = params_[i];
  dispatch(p.kernel.w, separable_[i] != 0, src, spitch, dst, dpitch, w, h, p.kernel.h, banks_[i], p.rdiv,
           p.rounding_bias(), p.border, p.value, s);
}

void ConvTaps::run(const uint16_t* src, int spitch, uint16_t* dst, int dpitch, int w, int h, int slot,
                   StreamHandle s) const {
  const size_t i = static_cast<size_t>(slot) % banks_.size();
  const ConvParams p = params_[i].at_16_bits();
  dispatch16(p.kernel.w, separable_[i] != 0, src, spitch, dst, dpitch, w, h, p.kernel.h, banks_[i], p.rdiv,
             p.rounding_bias(), p.border, p.value, s);
}

void conv_set_programmatic_launch(bool on) { g_programmatic_launch = on; }

void conv_plane_async(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h, const ConvParams& p,
                      bool separable, StreamHandle s) {
  static ConvTaps taps(1);
  static std::atomic<uint64_t> version{1};
  taps.use(p, separable, ++version, 0, s);
  taps.run(src, spitch, dst, dpitch, w, h, 0, s);
}
void conv_plane_async(const uint16_t* src, int spitch, uint16_t* dst, int dpitch, int w, int h, const ConvParams& p,
                      bool separable, StreamHandle s) {
  static ConvTaps taps(1);
  static std::atomic<uint64_t> version{1};
  taps.use(p, separable, ++version, 0, s);
  taps.run(src, spitch, dst, dpitch, w, h, 0, s);
}

}  // namespace vfp::cuda
