// CUDA wavelet denoising of 8-bit planes (definitions: cpu/wavelet.hpp).
//
// One plane's work, all on one stream, nothing read back by the host:
//   forward    one fused kernel per level: a shared-memory tile with its filter apron,
//              horizontal low/high pass then vertical, writing the four subbands; for
//              BayesShrink it also sums the squares of the three detail bands.
//   estimate   sigma = median(|dd1|) / 0.6745 by radix selection: three histogram
//              passes over the finest diagonal subband (12, 12 and 8 bits of the float's
//              bit pattern), each followed by a one-block scan that narrows the prefix of the
//              two middle ranks. Then one small kernel turns sigma and the sums into the
//              thresholds of every band, in device memory.
//   inverse    one fused kernel per level, coarsest first: loads the coefficient tile,
//              applies the shrinkage with its band's threshold as it loads (the thresholded
//              coefficients never touch memory), vertical then horizontal synthesis; the finest
//              level rounds to 8 bits.
// The arithmetic order is the CPU reference's, so coefficients are bit-identical; outputs
// differ from the CPU only through the float rounding of the threshold sums (docs/wavelet.md).
#pragma once
#include <cstdint>
#include <vector>

#include "core/gpu.hpp"
#include "cpu/wavelet.hpp"

namespace vfp::cuda {

class WaveletWorkspace {
 public:
  WaveletWorkspace();

  // forward + estimate + inverse of one plane on `s`. Grows the buffers when needed
  // (a synchronous allocation, on the first frame or after a live change of geometry).
  // `levels` is p.levels_for(w, h).
  void denoise(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h, const WaveletParams& p,
               int levels, StreamHandle s);
  // 16-bit planes (pitches in bytes), on the 8-bit scale as the CPU reference.
  void denoise(const uint16_t* src, int spitch, uint16_t* dst, int dpitch, int w, int h, const WaveletParams& p,
               int levels, StreamHandle s);

  // The parts, for tests and the benchmark. forward() decomposes with `levels` levels;
  // estimate() computes the thresholds of p for the last forward(); inverse() reconstructs,
  // shrinking the details with them when `shrink` (else the plain inverse transform).
  // Sample pitches are in bytes, except inverse_float's, which counts floats.
  void forward(const uint8_t* src, int spitch, int w, int h, const WaveletFilter& f, WaveletBoundary b, int levels,
               bool band_sums, StreamHandle s);
  void forward(const uint16_t* src, int spitch, int w, int h, const WaveletFilter& f, WaveletBoundary b, int levels,
               bool band_sums, StreamHandle s);
  void estimate(const WaveletParams& p, StreamHandle s);
  void inverse(uint8_t* dst, int dpitch, const WaveletParams& p, bool shrink, StreamHandle s);
  void inverse(uint16_t* dst, int dpitch, const WaveletParams& p, bool shrink, StreamHandle s);
  void inverse_float(float* dst, int dpitch, const WaveletParams& p, bool shrink, StreamHandle s);

  // Layout of the last forward(): device pointers of level l's subbands (l = 0 finest),
  // each geometry()[l].cw x ch, row-major. The approximation is valid until inverse().
  const std::vector<DwtLevel>& geometry() const { return geom_; }
  const float* band(int level, int which) const;  // which: 0 aa, 1 da, 2 ad, 3 dd
  // Copies sigma and the thresholds (3 per level) to the host; synchronises `s`.
  WaveletThresholds read_thresholds(StreamHandle s) const;

 private:
  template <typename OutT>
  void inverse_impl(OutT* dst, int dpitch, const WaveletParams& p, bool shrink, StreamHandle s);
  template <typename InT>
  void forward_impl(const InT* src, int spitch, int w, int h, const WaveletFilter& f, WaveletBoundary b, int levels,
                    bool band_sums, StreamHandle s);
  float* band_mut(int level, int which) const;

  DeviceBuffer coeffs_, stats_;
  std::vector<DwtLevel> geom_;
  std::vector<size_t> offsets_;  // per level, in floats
  const WaveletFilter* filter_ = nullptr;
  WaveletBoundary boundary_ = WaveletBoundary::Symmetric;
  int w_ = 0, h_ = 0;
};

}  // namespace vfp::cuda
