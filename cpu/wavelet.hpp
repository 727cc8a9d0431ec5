// Wavelet denoising (the `wavelet` / `wdenoise` stage): multi-level separable 2-D DWT of
// each plane, shrinkage of the detail coefficients, inverse DWT.
//
// Definitions (the CPU reference; docs/wavelet.md has the derivations and the checks):
//   1-D analysis of x[0..n) with a filter f of F taps (F even), as PyWavelets' dwt:
//     out[o] = sum_{j=0}^{F-1} f[j] * x[map(2o + s - j)],  o in [0, dwt_length(n))
//     symmetric:      s = 1,   map = half-sample mirror (..b a | a b .. y z | z y ..),
//                     dwt_length = floor((n + F - 1) / 2)
//     periodization:  s = F/2, map = period n' = n rounded up to even, x[n] = x[n-1],
//                     dwt_length = ceil(n / 2)
//   1-D synthesis of nc coefficients (approximation a, detail d) to m samples:
//     x[i] = sum_{m in 0..F-1, i+s2-m even} a'[k] * rec_lo[m] + d'[k] * rec_hi[m],
//     k = (i + s2 - m) / 2,  s2 = F - 2 (symmetric) or F/2 - 1 (periodization),
//     a'[k] = a[k] for 0 <= k < nc; outside: 0 (symmetric) or a[k mod nc] (periodization).
//     This is pywt's idwt, cropped to the length the caller needs (waverec's rule).
//   2-D: rows first (horizontal low/high), then columns. Subbands named as pywt's dwtn keys,
//     vertical letter first: aa (approximation), da (pywt cH), ad (cV), dd (cD).
//   All sums are float32 multiply-then-add (not fused) in ascending tap order; the CUDA kernels
//   use the same operations in the same order, so coefficients agree to the last bit or within float rounding of the
//   thresholds (docs/wavelet.md states the bound the tests check).
//   Output samples: floor(x + 0.5) clamped to 0..255.
//
// Shrinkage of a detail coefficient x with threshold T and fraction p = percent/100
// (p = 1 is the textbook rule, pywt.threshold; p < 1 is FFmpeg vaguedenoiser's partial
// shrinkage):
//   soft:    |x| <= T: x*(1-p);   else sign(x)*(|x| - p*T)
//   hard:    |x| <  T: x*(1-p);   else x
//   garrote: |x| <= T: x*(1-p);   else x*(1 - p*T^2/x^2)
// Thresholds, per plane:
//   sigma  = given, or median(|dd| of level 1) / 0.6744897501960817 (Donoho's MAD
//            estimator; numpy's median: mean of the two middle values for an even count).
//            Zeros count: scikit-image skips exact zeros (meant for masked images), which
//            on 8-bit frames biases haar's estimate upwards (docs/wavelet.md).
//   visushrink:  T = sigma * sqrt(2 ln N), N = samples in the plane (one T for all bands)
//   bayesshrink: T_band = sigma^2 / sqrt(max(mean(band^2) - sigma^2, FLT_EPSILON))
//   fixed:       T = threshold
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/hd.hpp"

namespace vfp {

constexpr int kWaveletMaxTaps = 16;

struct WaveletFilter {
  const char* name;       // ours: haar, db2..db8, sym2..sym8, bior2.2, cdf97
  const char* pywt_name;  // PyWavelets' name (cdf97 = bior4.4)
  int taps;               // even, <= kWaveletMaxTaps
  bool orthogonal;
  double dec_lo[kWaveletMaxTaps], dec_hi[kWaveletMaxTaps];
  double rec_lo[kWaveletMaxTaps], rec_hi[kWaveletMaxTaps];
};

// nullptr for an unknown name. Accepts our names and the pywt aliases db1 and bior4.4.
const WaveletFilter* find_wavelet(const std::string& name);
std::vector<std::string> wavelet_names();

enum class WaveletBoundary : int { Symmetric = 0, Periodization = 1 };
enum class ShrinkMode : int { Soft = 0, Hard = 1, Garrote = 2 };
enum class ShrinkMethod : int { BayesShrink = 0, VisuShrink = 1, Fixed = 2 };

constexpr double kMadToSigma = 0.6744897501960817;  // Phi^-1(3/4)

VFP_HD int dwt_length(int n, int taps, WaveletBoundary b) {
  return b == WaveletBoundary::Periodization ? (n + 1) / 2 : (n + taps - 1) / 2;
}
// pywt.dwt_max_level: floor(log2(n / (taps - 1))), 0 when n < taps - 1.
int dwt_max_level(int n, int taps);

// Maps a 1-D sample index (any integer) into [0, n) for the analysis step.
VFP_HD int dwt_sample_index(int i, int n, WaveletBoundary b) {
  if (b == WaveletBoundary::Periodization) {
    const int np = n + (n & 1);  // odd n: the last sample is repeated once
    i %= np;
    if (i < 0) i += np;
    return i < n ? i : n - 1;
  }
  const int p = 2 * n;  // half-sample symmetric, period 2n
  i %= p;
  if (i < 0) i += p;
  return i < n ? i : p - 1 - i;
}
VFP_HD int dwt_analysis_shift(int taps, WaveletBoundary b) {
  return b == WaveletBoundary::Periodization ? taps / 2 : 1;
}
VFP_HD int dwt_synthesis_shift(int taps, WaveletBoundary b) {
  return b == WaveletBoundary::Periodization ? taps / 2 - 1 : taps - 2;
}
// Coefficient index for synthesis (see the header comment); -1 = a zero coefficient.
VFP_HD int idwt_coeff_index(int k, int nc, WaveletBoundary b) {
  if (b == WaveletBoundary::Periodization) {
    k %= nc;
    return k < 0 ? k + nc : k;
  }
  return (k >= 0 && k < nc) ? k : -1;
}

// Float operations rounded one by one (no fused multiply-add) on host and device, so the
// CPU reference and the kernels agree bit for bit, and a difference of equal samples is
// exactly 0, as in PyWavelets (the noise estimate skips zero coefficients).
// stages/wavelet.cpp is compiled with -ffp-contract=off so the host compiler cannot fuse.
VFP_HD float rn_mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
VFP_HD float rn_add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
VFP_HD float mul_add(float a, float b, float acc) { return rn_add(acc, rn_mul(a, b)); }

VFP_HD float wavelet_shrink(float x, float t, ShrinkMode mode, float p) {
  const float ax = x < 0.f ? -x : x;
  const float keep = rn_add(1.f, -p);
  if (mode == ShrinkMode::Hard) return ax < t ? rn_mul(x, keep) : x;
  if (ax <= t) return rn_mul(x, keep);
  if (mode == ShrinkMode::Soft) {
    const float m = rn_add(ax, -rn_mul(p, t));
    return x < 0.f ? -m : m;
  }
  return rn_mul(x, rn_add(1.f, -(rn_mul(rn_mul(p, t), t) / rn_mul(x, x))));  // garrote
}

VFP_HD unsigned char wavelet_quantise(float x) {
  const float r = x + 0.5f;  // floor(x + 0.5), clamped
  return r <= 0.f ? 0 : (r >= 255.f ? 255 : static_cast<unsigned char>(static_cast<int>(r)));
}

// 16-bit planes are denoised on the 8-bit scale (sample / 257), so sigma, thresholds and
// every option mean the same at both depths; the result goes back as floor(x * 257 + 0.5),
// clamped to 0..65535. Explicitly rounded operations: the GPU may not fuse them.
constexpr float kWaveletInv257 = 1.0f / 257.0f;
VFP_HD float wavelet_load16(unsigned short v) { return rn_mul(static_cast<float>(v), kWaveletInv257); }
VFP_HD unsigned short wavelet_quantise16(float x) {
  const float r = rn_add(rn_mul(x, 257.f), 0.5f);
  return r <= 0.f ? 0 : (r >= 65535.f ? 65535 : static_cast<unsigned short>(static_cast<int>(r)));
}

struct WaveletParams {
  const WaveletFilter* wavelet = nullptr;  // default db4
  WaveletBoundary boundary = WaveletBoundary::Symmetric;
  int levels = 0;  // 0 = auto: max(max_level - 3, 1) (scikit-image's default), per plane
  ShrinkMode mode = ShrinkMode::Soft;
  ShrinkMethod method = ShrinkMethod::BayesShrink;
  double threshold = 0;  // method=fixed, in 8-bit sample units
  double sigma = 0;      // 0 = estimate per plane
  double percent = 100;  // partial shrinkage (vaguedenoiser); 100 = full
  int planes = 0xF;

  WaveletParams();
  // Levels for a w x h plane; throws vfp::Error naming the limit when `levels` is too high.
  int levels_for(int w, int h) const;
};

// Sizes of one decomposition level: its input (w x h) and its subbands (cw x ch).
struct DwtLevel {
  int w, h, cw, ch;
};
inline std::vector<DwtLevel> dwt_geometry(int w, int h, int taps, WaveletBoundary b, int levels) {
  std::vector<DwtLevel> g;
  for (int l = 0; l < levels; ++l) {
    g.push_back({w, h, dwt_length(w, taps, b), dwt_length(h, taps, b)});
    w = g.back().cw;
    h = g.back().ch;
  }
  return g;
}

// One plane's multi-level decomposition, finest level first.
struct WaveletCoeffs {
  std::vector<DwtLevel> geom;
  std::vector<float> approx;                   // aa of the coarsest level
  std::vector<std::vector<float>> da, ad, dd;  // per level, cw*ch each, row-major
};

// Buffers the CPU path reuses from frame to frame (the stage keeps one): allocating and
// zero-filling several plane-sized arrays per frame is serial work (page faults, memset)
// that kept the transform from scaling across cores. Vectors only grow.
struct WaveletScratch {
  std::vector<float> img, L, H, ping, pong;
  WaveletCoeffs coeffs;
};

// CPU reference. `pitch` in elements. Without scratch, temporaries are allocated per call.
void dwt2_level_cpu(const float* in, int w, int h, int pitch, const WaveletFilter& f, WaveletBoundary b, float* aa,
                    float* da, float* ad, float* dd, WaveletScratch* scratch = nullptr);
void idwt2_level_cpu(const float* aa, const float* da, const float* ad, const float* dd, int cw, int ch,
                     const WaveletFilter& f, WaveletBoundary b, float* out, int w, int h,
                     WaveletScratch* scratch = nullptr);
WaveletCoeffs wavedec2_cpu(const float* img, int w, int h, int pitch, const WaveletFilter& f, WaveletBoundary b,
                           int levels);
// The same into `c`, reusing its vectors when the geometry is unchanged.
void wavedec2_cpu(const float* img, int w, int h, int pitch, const WaveletFilter& f, WaveletBoundary b, int levels,
                  WaveletCoeffs& c, WaveletScratch* scratch);
// Reconstructs into w x h (the size given to wavedec2), cropping pywt's extra samples.
void waverec2_cpu(const WaveletCoeffs& c, const WaveletFilter& f, WaveletBoundary b, float* out,
                  WaveletScratch* scratch = nullptr);

// median(|x|) / 0.6745.
double estimate_sigma_mad(const float* d, size_t n);

// The thresholds of each level's (da, ad, dd), finest first, as the stage computes them.
struct WaveletThresholds {
  double sigma = 0;
  std::vector<float> t;  // 3 per level: da, ad, dd
};
WaveletThresholds wavelet_thresholds_cpu(const WaveletCoeffs& c, const WaveletParams& p, int w, int h);

// Denoises one 8-bit plane (the stage's CPU path). Returns the thresholds used.
WaveletThresholds wavelet_denoise_plane_cpu(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h,
                                            const WaveletParams& p, WaveletScratch* scratch = nullptr);
// The same for a 16-bit plane (pitches in bytes), computed on the 8-bit scale.
WaveletThresholds wavelet_denoise_plane_cpu(const uint16_t* src, int spitch, uint16_t* dst, int dpitch, int w, int h,
                                            const WaveletParams& p, WaveletScratch* scratch = nullptr);

}  // namespace vfp
