// CUDA median/percentile filter of one 8-bit or 16-bit plane (see cpu/median.hpp for the
// definition). Two algorithms, chosen by window size (docs/median.md has the measured
// crossover):
//   Select:    forgetful selection in registers on packed fp16 pairs, four vertically
//              adjacent pixels per thread sharing the common part of their windows,
//              shared-memory tile with the border applied; median rank only, windows up
//              to 7x7 and 9x9.
//   Histogram: one thread per column strip keeps its window's 256-bin (+16 coarse)
//              histogram in shared memory and slides it down: O(radius) per pixel, any
//              window and rank.
#pragma once
#include <cstdint>

#include "core/gpu.hpp"
#include "cpu/median.hpp"
#include "cuda/kernels.hpp"

namespace vfp::cuda {

enum class MedianAlgo { Auto, Select, Histogram };

// Which algorithm Auto picks for these parameters.
MedianAlgo median_auto_algo(const MedianParams& p);
bool median_select_supported(const MedianParams& p);

// One plane, pitches in bytes. 16-bit samples: the same selection on packed 16-bit integer
// pairs; the histogram slides over the upper byte, and over the lower byte of the samples
// whose upper byte is the answer's (rebuilt from the window when that changes).
void median_plane_async(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h, const MedianParams& p,
                        MedianAlgo algo, StreamHandle s);
void median_plane_async(const uint16_t* src, int spitch, uint16_t* dst, int dpitch, int w, int h, const MedianParams& p,
                        MedianAlgo algo, StreamHandle s);

}  // namespace vfp::cuda
