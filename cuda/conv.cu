#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "cuda/conv.hpp"
#include "pipeline/error.hpp"
#include "pipeline/log.hpp"

namespace vfp::cuda {

namespace {

constexpr int kBankFloats = 1024;  // 31x31 = 961 taps; separable: row at 0, column at 32
constexpr int kColOffset = 32;
__constant__ float c_taps[kConvBanks][kBankFloats];

std::mutex g_bank_mu;
bool g_bank_used[kConvBanks] = {};

constexpr int kBX = 32, kBY = 8, kPX = 4;  // threads; each thread 4x4 pixels
constexpr int kPY = 4;
constexpr int kOW = kBX * kPX;  // 128 outputs wide
constexpr int kOH = kBY * kPY;  // 32 outputs tall per block

// Row pitch (floats) of the shared tile for kernel width KW: every thread reads its
// window [4*tx, 4*tx + KW + 3) with aligned float4 loads.
template <int KW>
constexpr int tile_pitch() {
  return ((kOW - kPX) + 4 * ((KW + 3 + 3) / 4) + 3) / 4 * 4;
}

// Loads rows [y0, y0+rows) x columns [x0, x0+kOW+KW-1) as floats, border applied.
template <int KW>
__device__ void load_tile(float* tile, const uint8_t* __restrict__ src, int spitch, int w, int h,
                          int x0, int y0, int rows, Border border, int value) {
  constexpr int TW = kOW + KW - 1, TP = tile_pitch<KW>();
  const int tid = threadIdx.y * kBX + threadIdx.x;
  // Interior tiles of 4-byte aligned rows: 32-bit loads of the aligned words covering the
  // tile, four samples each (a quarter of the load instructions of byte loads). Block
  // origins are multiples of 128, so the misalignment of x0 depends on KW alone.
  constexpr int kOff = ((KW / 2 + 3) & ~3) - KW / 2;
  constexpr int words = (TW + kOff + 3) / 4;
  const int xa = x0 - kOff;
  if (xa >= 0 && y0 >= 0 && xa + 4 * words <= w && y0 + rows <= h && (spitch & 3) == 0 &&
      (reinterpret_cast<uintptr_t>(src) & 3) == 0) {
    for (int i = tid; i < rows * words; i += kBX * kBY) {
      const int r = i / words, wd = i - r * words;
      const uint32_t v = __ldg(reinterpret_cast<const uint32_t*>(src + static_cast<size_t>(y0 + r) * spitch + xa) + wd);
      const int c0 = 4 * wd - kOff;
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int c = c0 + b;
        if (c >= 0 && c < TW) tile[r * TP + c] = static_cast<float>((v >> (8 * b)) & 0xff);
      }
    }
    return;
  }
  const bool interior = x0 >= 0 && y0 >= 0 && x0 + TW <= w && y0 + rows <= h;
  for (int i = tid; i < rows * TW; i += kBX * kBY) {
    const int r = i / TW, c = i - r * TW;
    int v;
    if (interior) {
      v = __ldg(src + static_cast<size_t>(y0 + r) * spitch + x0 + c);
    } else {
      const int gy = border_index(y0 + r, h, border), gx = border_index(x0 + c, w, border);
      v = (gy < 0 || gx < 0) ? value : __ldg(src + static_cast<size_t>(gy) * spitch + gx);
    }
    tile[r * TP + c] = static_cast<float>(v);
  }
}

// r[0 .. KW+2] = row[0 .. KW+2] with aligned float4 loads.
template <int KW>
__device__ __forceinline__ void load_window(const float* row, float* r) {
#pragma unroll
  for (int m = 0; m < (KW + 3 + 3) / 4; ++m) {
    const float4 v = *reinterpret_cast<const float4*>(row + 4 * m);
    if (4 * m + 0 < KW + 3) r[4 * m + 0] = v.x;
    if (4 * m + 1 < KW + 3) r[4 * m + 1] = v.y;
    if (4 * m + 2 < KW + 3) r[4 * m + 2] = v.z;
    if (4 * m + 3 < KW + 3) r[4 * m + 3] = v.w;
  }
}

__device__ __forceinline__ uint8_t finish(float acc, float rdiv, float bias) {
  const float v = floorf(fmaf(acc, rdiv, bias) + 0.5f);
  return static_cast<uint8_t>(fminf(fmaxf(v, 0.f), 255.f));
}

__device__ __forceinline__ void store4(uint8_t* dst, int dpitch, int w, int h, int x, int y,
                                       const float* acc, float rdiv, float bias) {
  if (y >= h) return;
  uint8_t* d = dst + static_cast<size_t>(y) * dpitch;
  if (x + kPX <= w && ((reinterpret_cast<uintptr_t>(d + x) & 3) == 0)) {  // one 32-bit store
    const uint32_t v = finish(acc[0], rdiv, bias) | (finish(acc[1], rdiv, bias) << 8) |
                       (finish(acc[2], rdiv, bias) << 16) | (static_cast<uint32_t>(finish(acc[3], rdiv, bias)) << 24);
    *reinterpret_cast<uint32_t*>(d + x) = v;
    return;
  }
#pragma unroll
  for (int j = 0; j < kPX; ++j)
    if (x + j < w) d[x + j] = finish(acc[j], rdiv, bias);
}

// 2-D: the CPU reference's order exactly (ky outer, kx inner, fmaf). Each thread computes
// 4x4 outputs; every window row it loads from shared memory (4 + KW - 1 floats, aligned
// float4 loads) feeds the up to four output rows that use it, each with its own ky.
// KHC > 0: the kernel height is that compile-time constant (small square kernels, where
// loop and index overhead, not arithmetic, set the speed); 0: runtime `kh_arg`.
template <int KW, int KHC>
__global__ void __launch_bounds__(kBX* kBY)
    conv2d_kernel(const uint8_t* __restrict__ src, int spitch, uint8_t* __restrict__ dst, int dpitch,
                  int w, int h, int kh_arg, int bank, float rdiv, float bias, Border border, int value) {
  const int kh = KHC > 0 ? KHC : kh_arg;
  extern __shared__ float4 smem4[];
  float* tile = reinterpret_cast<float*>(smem4);
  constexpr int TP = tile_pitch<KW>();
  const int x0 = blockIdx.x * kOW - KW / 2, y0 = blockIdx.y * kOH - kh / 2;
  load_tile<KW>(tile, src, spitch, w, h, x0, y0, kOH + kh - 1, border, value);
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
#pragma unroll
  for (int j = 0; j < kPY; ++j) store4(dst, dpitch, w, h, ox, oy + j, acc[j], rdiv, bias);
}

// Separable, fused: horizontal pass of every tile row into shared memory, then the
// vertical pass from there. Global traffic stays one read and one write of the frame.
template <int KW>
__global__ void __launch_bounds__(kBX* kBY)
    conv_sep_kernel(const uint8_t* __restrict__ src, int spitch, uint8_t* __restrict__ dst, int dpitch,
                    int w, int h, int kh, int bank, float rdiv, float bias, Border border, int value) {
  extern __shared__ float4 smem4[];
  float* tile = reinterpret_cast<float*>(smem4);
  constexpr int TP = tile_pitch<KW>();
  const int rows = kOH + kh - 1;
  float* hp = tile + rows * TP;  // horizontal results: rows x kOW
  const int x0 = blockIdx.x * kOW - KW / 2, y0 = blockIdx.y * kOH - kh / 2;
  load_tile<KW>(tile, src, spitch, w, h, x0, y0, rows, border, value);
  __syncthreads();
  const float* taps = c_taps[bank];
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
#pragma unroll
  for (int j = 0; j < kPY; ++j) store4(dst, dpitch, w, h, ox, oy + j, acc[j], rdiv, bias);
}

using KernelFn = void (*)(const uint8_t*, int, uint8_t*, int, int, int, int, int, float, float, Border, int);

template <int KW>
void launch(bool separable, const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h,
            int kh, int bank, float rdiv, float bias, Border border, int value, StreamHandle s) {
  const int rows = kOH + kh - 1;
  size_t shmem = static_cast<size_t>(rows) * tile_pitch<KW>() * sizeof(float);
  if (separable) shmem += static_cast<size_t>(rows) * kOW * sizeof(float);
  const bool fixed = !separable && kh == KW && KW <= 7;
  KernelFn fn = separable ? conv_sep_kernel<KW> : (fixed ? conv2d_kernel<KW, (KW <= 7 ? KW : 0)> : conv2d_kernel<KW, 0>);
  static std::once_flag once[3];
  std::call_once(once[separable ? 1 : (fixed ? 2 : 0)], [&] {
    VFP_CUDA(cudaFuncSetAttribute(reinterpret_cast<const void*>(fn),
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, 96 * 1024));
  });
  dim3 block(kBX, kBY), grid((w + kOW - 1) / kOW, (h + kOH - 1) / kOH);
  fn<<<grid, block, shmem, s>>>(src, spitch, dst, dpitch, w, h, kh, bank, rdiv, bias, border, value);
  VFP_CUDA_LAUNCHED(separable ? "conv_sep_kernel" : "conv2d_kernel");
}

void dispatch(int kw, bool separable, const uint8_t* src, int spitch, uint8_t* dst, int dpitch,
              int w, int h, int kh, int bank, float rdiv, float bias, Border border, int value,
              StreamHandle s) {
  switch (kw) {
#define VFP_KW(K) \
  case K: return launch<K>(separable, src, spitch, dst, dpitch, w, h, kh, bank, rdiv, bias, border, value, s);
    VFP_KW(1) VFP_KW(3) VFP_KW(5) VFP_KW(7) VFP_KW(9) VFP_KW(11) VFP_KW(13) VFP_KW(15)
    VFP_KW(17) VFP_KW(19) VFP_KW(21) VFP_KW(23) VFP_KW(25) VFP_KW(27) VFP_KW(29) VFP_KW(31)
#undef VFP_KW
  }
  throw Error(ErrorKind::Internal, log::format("conv: no kernel for width %d", kw));
}

}  // namespace

ConvTaps::ConvTaps(int slots) {
  std::lock_guard<std::mutex> lk(g_bank_mu);
  for (int b = 0; b < kConvBanks && static_cast<int>(banks_.size()) < slots; ++b)
    if (!g_bank_used[b]) banks_.push_back(b);
  if (static_cast<int>(banks_.size()) < slots) {
    banks_.clear();
    throw Error(ErrorKind::Usage,
                log::format("conv: out of constant-memory banks (%d in all, one per conv stage and "
                            "frame in flight); use fewer conv stages or a smaller --depth",
                            kConvBanks));
  }
  for (int b : banks_) g_bank_used[b] = true;
  versions_.assign(banks_.size(), 0);
  params_.resize(banks_.size());
  separable_.assign(banks_.size(), 0);
}

ConvTaps::~ConvTaps() {
  std::lock_guard<std::mutex> lk(g_bank_mu);
  for (int b : banks_) g_bank_used[b] = false;
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
                                   static_cast<size_t>(banks_[i]) * kBankFloats * sizeof(float),
                                   cudaMemcpyHostToDevice, s));
  versions_[i] = version;
  params_[i] = p;
  separable_[i] = separable ? 1 : 0;
}

void ConvTaps::run(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h, int slot,
                   StreamHandle s) const {
  const size_t i = static_cast<size_t>(slot) % banks_.size();
  const ConvParams& p = params_[i];
  dispatch(p.kernel.w, separable_[i] != 0, src, spitch, dst, dpitch, w, h, p.kernel.h, banks_[i], p.rdiv,
           p.bias, p.border, p.value, s);
}

void conv_plane_async(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h,
                      const ConvParams& p, bool separable, StreamHandle s) {
  static ConvTaps taps(1);
  static std::atomic<uint64_t> version{1};
  taps.use(p, separable, ++version, 0, s);
  taps.run(src, spitch, dst, dpitch, w, h, 0, s);
}

}  // namespace vfp::cuda
