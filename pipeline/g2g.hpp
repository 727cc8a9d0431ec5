// Glass-to-glass latency (the display-to-capture loop of a live setup): the display shows
// a patch that flips between black and white at known host times, a camera looking at the
// screen captures frames with host timestamps, and the delay of each flip is the capture
// time of the first frame whose patch has crossed to the new level. The analysis below is
// independent of where the samples come from (tests feed it synthetic recordings).
#pragma once
#include <cstdint>
#include <vector>

#include "core/frame.hpp"
#include "pipeline/stats.hpp"

namespace vfp {

struct G2GFlip {
  int64_t t_ns = 0;  // host time the display showed the new level (after the buffer swap)
  bool white = false;
};
struct G2GSample {
  int64_t t_ns = 0;  // host capture time of the camera frame
  double luma = 0;   // mean luma of the patch region in it
};
struct G2GResult {
  std::vector<double> delays_ms;  // one per flip that was seen
  int missed = 0;                 // flips with no crossing before the next flip (or timeout)
  double threshold = 0;           // luma midway between the dark and bright levels seen
  Summary ms;
};

// Threshold: midway between the 5th and 95th percentiles of the samples' luma. A flip's
// delay is from its time to the first later sample on the new side of the threshold, if
// that comes before the next flip and within `timeout_ns`.
G2GResult analyze_glass_to_glass(const std::vector<G2GFlip>& flips, const std::vector<G2GSample>& samples,
                                 int64_t timeout_ns = 1'000'000'000);

// Mean luma of the centred region covering `fraction` of each dimension (plane 0 of
// gray/YUV frames; Rec.601 luma of packed RGB/BGR).
double patch_luma(const ImageView& v, double fraction = 0.5);

}  // namespace vfp
