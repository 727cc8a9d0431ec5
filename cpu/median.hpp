// Median / percentile filter (FFmpeg's `median`, extended with border modes).
//
// Definition (the CPU reference): for every pixel of every selected plane, take the
// (2*radius+1) x (2*radiusV+1) window centred on it, with samples outside the plane given
// by the border mode, sort the n samples and output the one at 0-based rank
//     k = floor(percentile * (n - 1) + 0.5)
// (percentile 0.5 -> the median, 0 -> the minimum, 1 -> the maximum). With replicate
// borders and percentile 0.5 this is FFmpeg's vf_median output, bit for bit.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/frame.hpp"
#include "cpu/border.hpp"

namespace vfp {

struct MedianParams {
  int radius = 1;   // horizontal, 1..127
  int radiusV = 0;  // vertical, 0 = same as radius
  double percentile = 0.5;
  int planes = 0xF;  // bit i: filter plane i; other planes are copied
  Border border = Border::Replicate;
  int value = 0;  // constant border value

  int rx() const { return radius; }
  int ry() const { return radiusV > 0 ? radiusV : radius; }
  int count() const { return (2 * rx() + 1) * (2 * ry() + 1); }
  int rank() const {  // k above
    const int n = count();
    const int k = static_cast<int>(std::floor(percentile * (n - 1) + 0.5));
    return k < 0 ? 0 : (k > n - 1 ? n - 1 : k);
  }
};

// One plane (pitches in bytes). `naive` sorts every window (the literal definition, slow,
// for tests); the default slides a histogram down each column (same result, O(radius)):
// 256 bins for 8-bit samples, 65536 searched through three coarser levels for 16-bit ones.
// With 16-bit samples `value` is on their scale (the stage gives the 8-bit value x 257).
void median_plane_cpu(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h, const MedianParams& p);
void median_plane_cpu(const uint16_t* src, int spitch, uint16_t* dst, int dpitch, int w, int h, const MedianParams& p);
void median_plane_naive(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h, const MedianParams& p);
void median_plane_naive(const uint16_t* src, int spitch, uint16_t* dst, int dpitch, int w, int h,
                        const MedianParams& p);

}  // namespace vfp
