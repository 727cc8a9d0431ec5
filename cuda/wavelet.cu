// CUDA wavelet denoising: fused per-level forward and inverse kernels, radix-select noise
// estimate, device-side thresholds. Overview in cuda/wavelet.hpp.
#include "cuda/wavelet.hpp"

#include <cuda_runtime.h>
#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <type_traits>

#include "core/error.hpp"
#include "core/log.hpp"

namespace vfp::cuda {

namespace {

constexpr int kMaxLevels = 16;
constexpr int kHistBins = 4096;

struct Taps {
  float lo[kWaveletMaxTaps], hi[kWaveletMaxTaps];
};

// Device-side state of one plane's statistics and thresholds.
struct Stats {
  double sums[3 * kMaxLevels];      // sum of squares of da, ad, dd per level
  unsigned int hist[2][kHistBins];  // radix-select histograms of the two middle ranks
  unsigned int count;               // |dd1| values seen by pass 0
  unsigned int prefix[2], rank[2];  // selection state of the two ranks
  double sigma;                     // double: BayesShrink's sigma^2 - mean square cancels digits
  float thr[3 * kMaxLevels];
};

struct BandCounts {
  double n[kMaxLevels];
};

__device__ __forceinline__ int floor_div2(int a) { return a >= 0 ? a / 2 : -((1 - a) / 2); }

__device__ __forceinline__ float load_sample(const uint8_t* p) { return static_cast<float>(*p); }
__device__ __forceinline__ float load_sample(const uint16_t* p) { return wavelet_load16(*p); }
__device__ __forceinline__ float load_sample(const float* p) { return *p; }
__device__ __forceinline__ void store_sample(uint8_t* p, float v) { *p = wavelet_quantise(v); }
__device__ __forceinline__ void store_sample(uint16_t* p, float v) { *p = wavelet_quantise16(v); }
__device__ __forceinline__ void store_sample(float* p, float v) { *p = v; }

// Sums three values over the block and adds them to dst[0..2].
__device__ void block_add3(double a, double b, double c, double* dst) {
  __shared__ double part[3][32];
  double v[3] = {a, b, c};
  for (int i = 0; i < 3; ++i)
    for (int o = 16; o > 0; o >>= 1) v[i] += __shfl_down_sync(0xffffffffu, v[i], o);
  const int tid = threadIdx.y * blockDim.x + threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (lane == 0)
    for (int i = 0; i < 3; ++i) part[i][warp] = v[i];
  __syncthreads();
  if (warp == 0) {
    const int nw = (blockDim.x * blockDim.y + 31) / 32;
    for (int i = 0; i < 3; ++i) {
      double x = lane < nw ? part[i][lane] : 0.0;
      for (int o = 16; o > 0; o >>= 1) x += __shfl_down_sync(0xffffffffu, x, o);
      if (lane == 0) atomicAdd(&dst[i], x);
    }
  }
}

// ---- forward: one level ------------------------------------------------------------------
constexpr int kFwdTX = 32, kFwdTY = 16;  // output coefficients per block
constexpr int kBlockX = 32, kBlockY = 8;

template <int F, typename InT>
__global__ void __launch_bounds__(kBlockX* kBlockY)
    dwt2_forward_kernel(const InT* __restrict__ in, int ipitch, int w, int h, int cw, int ch, WaveletBoundary b, Taps t,
                        float* __restrict__ aa, float* __restrict__ da, float* __restrict__ ad, float* __restrict__ dd,
                        double* sums) {
  constexpr int RW = 2 * kFwdTX + F - 2, RH = 2 * kFwdTY + F - 2;
  __shared__ float S[RH][RW + 1];
  __shared__ float L[RH][kFwdTX + 1], H[RH][kFwdTX + 1];
  const int tid = threadIdx.y * kBlockX + threadIdx.x;
  const int ox0 = blockIdx.x * kFwdTX, oy0 = blockIdx.y * kFwdTY;
  const int s = dwt_analysis_shift(F, b);
  const int x0 = 2 * ox0 + s - (F - 1), y0 = 2 * oy0 + s - (F - 1);
  for (int i = tid; i < RH * RW; i += kBlockX * kBlockY) {
    const int r = i / RW, c = i - r * RW;
    const int gy = dwt_sample_index(y0 + r, h, b), gx = dwt_sample_index(x0 + c, w, b);
    S[r][c] = load_sample(in + static_cast<size_t>(gy) * ipitch + gx);
  }
  __syncthreads();
  for (int i = tid; i < RH * kFwdTX; i += kBlockX * kBlockY) {
    const int r = i / kFwdTX, c = i - r * kFwdTX;
    float l = 0.f, hh = 0.f;
#pragma unroll
    for (int j = 0; j < F; ++j) {
      const float v = S[r][2 * c + F - 1 - j];
      l = mul_add(t.lo[j], v, l);
      hh = mul_add(t.hi[j], v, hh);
    }
    L[r][c] = l;
    H[r][c] = hh;
  }
  __syncthreads();
  const int c = threadIdx.x, ox = ox0 + c;
  // Double: BayesShrink subtracts sigma^2 from the mean square, which amplifies its error.
  double s_da = 0, s_ad = 0, s_dd = 0;
#pragma unroll
  for (int k = 0; k < kFwdTY / kBlockY; ++k) {
    const int r = threadIdx.y + k * kBlockY, oy = oy0 + r;
    float a0 = 0.f, d0 = 0.f, a1 = 0.f, d1 = 0.f;
#pragma unroll
    for (int j = 0; j < F; ++j) {
      const float l = L[2 * r + F - 1 - j][c], hh = H[2 * r + F - 1 - j][c];
      a0 = mul_add(t.lo[j], l, a0);
      d0 = mul_add(t.hi[j], l, d0);
      a1 = mul_add(t.lo[j], hh, a1);
      d1 = mul_add(t.hi[j], hh, d1);
    }
    if (ox < cw && oy < ch) {
      const size_t o = static_cast<size_t>(oy) * cw + ox;
      aa[o] = a0;
      da[o] = d0;
      ad[o] = a1;
      dd[o] = d1;
      s_da += static_cast<double>(d0) * d0;
      s_ad += static_cast<double>(a1) * a1;
      s_dd += static_cast<double>(d1) * d1;
    }
  }
  if (sums) block_add3(s_da, s_ad, s_dd, sums);
}

// ---- inverse: one level ------------------------------------------------------------------
constexpr int kInvTX = 32, kInvTY = 32;  // output samples per block

template <int F, typename OutT>
__global__ void __launch_bounds__(kBlockX* kBlockY)
    idwt2_inverse_kernel(const float* __restrict__ aa, const float* __restrict__ da, const float* __restrict__ ad,
                         const float* __restrict__ dd, int cw, int ch, WaveletBoundary b, Taps t,
                         const float* __restrict__ thr, ShrinkMode mode, float pct, OutT* __restrict__ out, int opitch,
                         int w, int h) {
  constexpr int C = kInvTX / 2 + F / 2 + 1;  // coefficients per tile side
  __shared__ float A[4][C][C + 1];
  __shared__ float L[kInvTY][C + 1], H[kInvTY][C + 1];
  // The tap index depends on each output's parity, a run-time value: indexing the kernel
  // parameter with it would copy the taps to local memory in every thread.
  __shared__ float lo[F], hi[F];
  const int tid = threadIdx.y * kBlockX + threadIdx.x;
  if (tid < F) {
    lo[tid] = t.lo[tid];
    hi[tid] = t.hi[tid];
  }
  const int x0 = blockIdx.x * kInvTX, y0 = blockIdx.y * kInvTY;
  const int s2 = dwt_synthesis_shift(F, b);
  const int kx0 = floor_div2(x0 + s2 - (F - 1)), ky0 = floor_div2(y0 + s2 - (F - 1));
  float t1 = 0.f, t2 = 0.f, t3 = 0.f;
  if (thr) {
    t1 = thr[0];
    t2 = thr[1];
    t3 = thr[2];
  }
  for (int i = tid; i < C * C; i += kBlockX * kBlockY) {
    const int r = i / C, c = i - r * C;
    const int ky = idwt_coeff_index(ky0 + r, ch, b), kx = idwt_coeff_index(kx0 + c, cw, b);
    float v0 = 0.f, v1 = 0.f, v2 = 0.f, v3 = 0.f;
    if (ky >= 0 && kx >= 0) {
      const size_t o = static_cast<size_t>(ky) * cw + kx;
      v0 = aa[o];
      v1 = da[o];
      v2 = ad[o];
      v3 = dd[o];
      if (thr) {
        v1 = wavelet_shrink(v1, t1, mode, pct);
        v2 = wavelet_shrink(v2, t2, mode, pct);
        v3 = wavelet_shrink(v3, t3, mode, pct);
      }
    }
    A[0][r][c] = v0;
    A[1][r][c] = v1;
    A[2][r][c] = v2;
    A[3][r][c] = v3;
  }
  __syncthreads();
  // Vertical synthesis: output rows of the tile x coefficient columns.
  for (int i = tid; i < kInvTY * C; i += kBlockX * kBlockY) {
    const int y = i / C, c = i - y * C, gy = y0 + y;
    float l = 0.f, hh = 0.f;
    const int m0 = (gy + s2) & 1;
#pragma unroll
    for (int mm = 0; mm < F / 2; ++mm) {
      const int m = m0 + 2 * mm;
      const int kr = (gy + s2 - m) / 2 - ky0;
      l = mul_add(A[0][kr][c], lo[m], l);
      l = mul_add(A[1][kr][c], hi[m], l);
      hh = mul_add(A[2][kr][c], lo[m], hh);
      hh = mul_add(A[3][kr][c], hi[m], hh);
    }
    L[y][c] = l;
    H[y][c] = hh;
  }
  __syncthreads();
  const int x = threadIdx.x, gx = x0 + x;
  const int m0 = (gx + s2) & 1;
#pragma unroll
  for (int k = 0; k < kInvTY / kBlockY; ++k) {
    const int y = threadIdx.y + k * kBlockY, gy = y0 + y;
    float v = 0.f;
#pragma unroll
    for (int mm = 0; mm < F / 2; ++mm) {
      const int m = m0 + 2 * mm;
      const int kc = (gx + s2 - m) / 2 - kx0;
      v = mul_add(L[y][kc], lo[m], v);
      v = mul_add(H[y][kc], hi[m], v);
    }
    if (gx < w && gy < h) store_sample(out + static_cast<size_t>(gy) * opitch + gx, v);
  }
}

// ---- noise estimate: radix selection of the two middle |dd1| values --------------------
// Pass p looks at bits [shift, shift + bits) of the float's bit pattern; values whose
// higher bits equal a rank's prefix count in that rank's histogram.
__global__ void select_hist_kernel(const float* __restrict__ d, size_t n, int pass, Stats* st) {
  __shared__ unsigned int hist[2][kHistBins];
  for (int i = threadIdx.x; i < 2 * kHistBins; i += blockDim.x) (&hist[0][0])[i] = 0;
  __syncthreads();
  const int shift = pass == 0 ? 20 : (pass == 1 ? 8 : 0);
  const unsigned int mask = pass == 2 ? 0xFFu : 0xFFFu;
  const unsigned int p0 = st->prefix[0], p1 = st->prefix[1];
  const bool same = p0 == p1;
  unsigned int counted = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const unsigned int u = __float_as_uint(d[i]) & 0x7FFFFFFFu;  // |x|
    ++counted;
    const unsigned int hi = pass == 0 ? 0u : (u >> (shift + (pass == 1 ? 12 : 8)));
    const unsigned int dig = (u >> shift) & mask;
    if (hi == p0) atomicAdd(&hist[0][dig], 1u);
    if (!same && hi == p1) atomicAdd(&hist[1][dig], 1u);
  }
  if (pass == 0) {
    for (int o = 16; o > 0; o >>= 1) counted += __shfl_down_sync(0xffffffffu, counted, o);
    if ((threadIdx.x & 31) == 0 && counted) atomicAdd(&st->count, counted);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kHistBins; i += blockDim.x) {
    if (hist[0][i]) atomicAdd(&st->hist[0][i], hist[0][i]);
    if (!same && hist[1][i]) atomicAdd(&st->hist[1][i], hist[1][i]);
  }
}

constexpr int kScanThreads = 1024;

// One block: finds the digit holding each rank, extends the prefixes, clears the
// histograms for the next pass; after the last pass computes sigma.
__global__ void __launch_bounds__(kScanThreads) select_scan_kernel(int pass, Stats* st) {
  using Scan = cub::BlockScan<unsigned int, kScanThreads>;
  __shared__ typename Scan::TempStorage tmp;
  __shared__ unsigned int found_digit, found_before;
  const int bits = pass == 2 ? 8 : 12;
  const int bins = 1 << bits, per = kHistBins / kScanThreads;  // 4 bins per thread
  if (pass == 0 && threadIdx.x == 0) {
    st->rank[0] = st->count ? (st->count - 1) / 2 : 0;
    st->rank[1] = st->count / 2;
  }
  __syncthreads();
  const bool same = st->prefix[0] == st->prefix[1];
  for (int r = 0; r < 2; ++r) {
    const unsigned int* hist = st->hist[(same || pass == 0) ? 0 : r];
    unsigned int local[per], sum = 0;
    for (int k = 0; k < per; ++k) {
      const int bin = threadIdx.x * per + k;
      local[k] = bin < bins ? hist[bin] : 0;
      sum += local[k];
    }
    unsigned int before = 0;
    Scan(tmp).ExclusiveSum(sum, before);
    const unsigned int want = st->rank[r];
    if (want >= before && want < before + sum) {
      unsigned int acc = before;
      for (int k = 0; k < per; ++k) {
        if (want < acc + local[k]) {
          found_digit = threadIdx.x * per + k;
          found_before = acc;
          break;
        }
        acc += local[k];
      }
    }
    __syncthreads();
    if (threadIdx.x == 0 && st->count) {
      st->prefix[r] = (st->prefix[r] << bits) | found_digit;
      st->rank[r] -= found_before;
    }
    __syncthreads();
  }
  for (int i = threadIdx.x; i < 2 * kHistBins; i += kScanThreads) (&st->hist[0][0])[i] = 0;
  if (pass == 2 && threadIdx.x == 0) {
    const double med = st->count ? (static_cast<double>(__uint_as_float(st->prefix[0])) +
                                    static_cast<double>(__uint_as_float(st->prefix[1]))) /
                                       2.0
                                 : 0.0;
    st->sigma = med / kMadToSigma;
  }
}

__global__ void thresholds_kernel(Stats* st, int levels, ShrinkMethod method, double sigma_given, double fixed,
                                  double plane_samples, BandCounts counts) {
  const int i = threadIdx.x;
  const bool estimated = sigma_given <= 0 && method != ShrinkMethod::Fixed;
  const double sigma = sigma_given > 0 ? sigma_given : (estimated ? st->sigma : 0.0);
  __syncthreads();  // every thread has read the estimate before it is replaced
  if (i == 0) st->sigma = sigma;
  if (i >= 3 * levels) return;
  double t = fixed;
  if (method == ShrinkMethod::VisuShrink) {
    t = sigma * ::sqrt(2.0 * ::log(plane_samples));
  } else if (method == ShrinkMethod::BayesShrink) {
    const double var = sigma * sigma, dvar = st->sums[i] / counts.n[i / 3];
    t = var / sqrt(fmax(dvar - var, static_cast<double>(FLT_EPSILON)));
  }
  st->thr[i] = static_cast<float>(fmin(t, static_cast<double>(FLT_MAX)));
}

// The decomposition (analysis) or reconstruction (synthesis) filter pair as float.
Taps filter_taps(const WaveletFilter& f, bool analysis) {
  Taps t{};
  for (int j = 0; j < f.taps; ++j) {
    t.lo[j] = static_cast<float>(analysis ? f.dec_lo[j] : f.rec_lo[j]);
    t.hi[j] = static_cast<float>(analysis ? f.dec_hi[j] : f.rec_hi[j]);
  }
  return t;
}

// Calls fn(std::integral_constant<int, F>) for the filter length.
template <typename Fn>
void with_taps(int taps, Fn&& fn) {
  switch (taps) {
    case 2:
      fn(std::integral_constant<int, 2>{});
      break;
    case 4:
      fn(std::integral_constant<int, 4>{});
      break;
    case 6:
      fn(std::integral_constant<int, 6>{});
      break;
    case 8:
      fn(std::integral_constant<int, 8>{});
      break;
    case 10:
      fn(std::integral_constant<int, 10>{});
      break;
    case 12:
      fn(std::integral_constant<int, 12>{});
      break;
    case 14:
      fn(std::integral_constant<int, 14>{});
      break;
    case 16:
      fn(std::integral_constant<int, 16>{});
      break;
    default:
      throw Error(ErrorKind::Internal, log::format("wavelet: unsupported filter length %d", taps));
  }
}

}  // namespace

WaveletWorkspace::WaveletWorkspace() : stats_(DeviceBuffer::frame(sizeof(Stats), "wavelet statistics")) {}

float* WaveletWorkspace::band_mut(int level, int which) const {
  const DwtLevel& g = geom_.at(static_cast<size_t>(level));
  return reinterpret_cast<float*>(coeffs_.get()) + offsets_[static_cast<size_t>(level)] +
         static_cast<size_t>(which) * g.cw * g.ch;
}
const float* WaveletWorkspace::band(int level, int which) const { return band_mut(level, which); }

template <typename InT>
void WaveletWorkspace::forward_impl(const InT* src, int spitch, int w, int h, const WaveletFilter& f, WaveletBoundary b,
                                    int levels, bool band_sums, StreamHandle s) {
  spitch /= static_cast<int>(sizeof(InT));  // bytes -> samples
  if (levels < 1 || levels > kMaxLevels)
    throw Error(ErrorKind::Internal, log::format("wavelet: %d levels (1..%d)", levels, kMaxLevels));
  geom_ = dwt_geometry(w, h, f.taps, b, levels);
  offsets_.clear();
  size_t total = 0;
  for (const DwtLevel& g : geom_) {
    offsets_.push_back(total);
    total += 4 * static_cast<size_t>(g.cw) * g.ch;
  }
  if (coeffs_.size() < total * sizeof(float)) {
    // The old buffer may go back to the frame memory cache: its kernels must be done.
    if (coeffs_.get()) VFP_CUDA(cudaStreamSynchronize(s));
    coeffs_ = DeviceBuffer::frame(total * sizeof(float), "wavelet coefficients");
  }
  filter_ = &f;
  boundary_ = b;
  w_ = w;
  h_ = h;
  Stats* st = reinterpret_cast<Stats*>(stats_.get());
  memset_async(st->sums, 0, sizeof(st->sums), s);
  const Taps t = filter_taps(f, true);
  const dim3 block(kBlockX, kBlockY);
  with_taps(f.taps, [&](auto F) {
    for (int l = 0; l < levels; ++l) {
      const DwtLevel& g = geom_[static_cast<size_t>(l)];
      const dim3 grid((g.cw + kFwdTX - 1) / kFwdTX, (g.ch + kFwdTY - 1) / kFwdTY);
      double* sums = band_sums ? st->sums + 3 * l : nullptr;
      if (l == 0)
        dwt2_forward_kernel<decltype(F)::value, InT><<<grid, block, 0, s>>>(src, spitch, g.w, g.h, g.cw, g.ch, b, t,
                                                                            band_mut(0, 0), band_mut(0, 1),
                                                                            band_mut(0, 2), band_mut(0, 3), sums);
      else
        dwt2_forward_kernel<decltype(F)::value, float>
            <<<grid, block, 0, s>>>(band_mut(l - 1, 0), g.w, g.w, g.h, g.cw, g.ch, b, t, band_mut(l, 0), band_mut(l, 1),
                                    band_mut(l, 2), band_mut(l, 3), sums);
      VFP_CUDA_LAUNCHED("dwt2_forward_kernel");
    }
  });
}

void WaveletWorkspace::forward(const uint8_t* src, int spitch, int w, int h, const WaveletFilter& f, WaveletBoundary b,
                               int levels, bool band_sums, StreamHandle s) {
  forward_impl(src, spitch, w, h, f, b, levels, band_sums, s);
}
void WaveletWorkspace::forward(const uint16_t* src, int spitch, int w, int h, const WaveletFilter& f, WaveletBoundary b,
                               int levels, bool band_sums, StreamHandle s) {
  forward_impl(src, spitch, w, h, f, b, levels, band_sums, s);
}

void WaveletWorkspace::estimate(const WaveletParams& p, StreamHandle s) {
  Stats* st = reinterpret_cast<Stats*>(stats_.get());
  const int levels = static_cast<int>(geom_.size());
  if (p.sigma <= 0 && p.method != ShrinkMethod::Fixed) {
    // Fresh selection state (histograms, count, prefixes, ranks): estimate() may be re-run.
    memset_async(&st->hist, 0, offsetof(Stats, sigma) - offsetof(Stats, hist), s);
    const size_t n = static_cast<size_t>(geom_[0].cw) * geom_[0].ch;
    const int threads = 256;
    const int blocks = static_cast<int>(std::min<size_t>((n + threads * 8 - 1) / (threads * 8), 264));
    for (int pass = 0; pass < 3; ++pass) {
      select_hist_kernel<<<blocks, threads, 0, s>>>(band(0, 3), n, pass, st);
      VFP_CUDA_LAUNCHED("select_hist_kernel");
      select_scan_kernel<<<1, kScanThreads, 0, s>>>(pass, st);
      VFP_CUDA_LAUNCHED("select_scan_kernel");
    }
  }
  BandCounts counts{};
  for (int l = 0; l < levels; ++l)
    counts.n[l] = static_cast<double>(geom_[static_cast<size_t>(l)].cw) * geom_[static_cast<size_t>(l)].ch;
  thresholds_kernel<<<1, 3 * kMaxLevels, 0, s>>>(st, levels, p.method, p.sigma, p.threshold,
                                                 static_cast<double>(w_) * h_, counts);
  VFP_CUDA_LAUNCHED("thresholds_kernel");
}

template <typename OutT>
void WaveletWorkspace::inverse_impl(OutT* dst, int dpitch, const WaveletParams& p, bool shrink, StreamHandle s) {
  const Stats* st = reinterpret_cast<const Stats*>(stats_.get());
  const Taps t = filter_taps(*filter_, false);
  const float pct = static_cast<float>(p.percent / 100.0);
  const dim3 block(kBlockX, kBlockY);
  with_taps(filter_->taps, [&](auto F) {
    for (int l = static_cast<int>(geom_.size()) - 1; l >= 0; --l) {
      const DwtLevel& g = geom_[static_cast<size_t>(l)];
      const dim3 grid((g.w + kInvTX - 1) / kInvTX, (g.h + kInvTY - 1) / kInvTY);
      const float* thr = shrink ? st->thr + 3 * l : nullptr;
      if (l == 0)
        idwt2_inverse_kernel<decltype(F)::value, OutT>
            <<<grid, block, 0, s>>>(band(0, 0), band(0, 1), band(0, 2), band(0, 3), g.cw, g.ch, boundary_, t, thr,
                                    p.mode, pct, dst, dpitch / static_cast<int>(sizeof(OutT)), g.w, g.h);
      else  // into the approximation of the next finer level
        idwt2_inverse_kernel<decltype(F)::value, float>
            <<<grid, block, 0, s>>>(band(l, 0), band(l, 1), band(l, 2), band(l, 3), g.cw, g.ch, boundary_, t, thr,
                                    p.mode, pct, band_mut(l - 1, 0), g.w, g.w, g.h);
      VFP_CUDA_LAUNCHED("idwt2_inverse_kernel");
    }
  });
}

void WaveletWorkspace::inverse(uint8_t* dst, int dpitch, const WaveletParams& p, bool shrink, StreamHandle s) {
  inverse_impl(dst, dpitch, p, shrink, s);
}
void WaveletWorkspace::inverse(uint16_t* dst, int dpitch, const WaveletParams& p, bool shrink, StreamHandle s) {
  inverse_impl(dst, dpitch, p, shrink, s);
}
void WaveletWorkspace::inverse_float(float* dst, int dpitch, const WaveletParams& p, bool shrink, StreamHandle s) {
  inverse_impl(dst, dpitch * static_cast<int>(sizeof(float)), p, shrink, s);
}

void WaveletWorkspace::denoise(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h,
                               const WaveletParams& p, int levels, StreamHandle s) {
  forward(src, spitch, w, h, *p.wavelet, p.boundary, levels, p.method == ShrinkMethod::BayesShrink, s);
  estimate(p, s);
  inverse(dst, dpitch, p, true, s);
}
void WaveletWorkspace::denoise(const uint16_t* src, int spitch, uint16_t* dst, int dpitch, int w, int h,
                               const WaveletParams& p, int levels, StreamHandle s) {
  forward(src, spitch, w, h, *p.wavelet, p.boundary, levels, p.method == ShrinkMethod::BayesShrink, s);
  estimate(p, s);
  inverse(dst, dpitch, p, true, s);
}

WaveletThresholds WaveletWorkspace::read_thresholds(StreamHandle s) const {
  Stats st{};
  memcpy_d2h_async(&st, stats_.get(), sizeof(Stats), s);
  VFP_CUDA(cudaStreamSynchronize(s));
  WaveletThresholds r;
  r.sigma = st.sigma;
  r.t.assign(st.thr, st.thr + 3 * geom_.size());
  return r;
}

}  // namespace vfp::cuda
