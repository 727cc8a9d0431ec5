// MMP's post-filter designed and applied on the device (codecs/mmp/postfilter.hpp): the
// same filter and the same output as design_post_filter(), byte for byte.
//
// Everything per sample runs on the device, on one stream: the activity and its 3x3 sums,
// their histogram and the quartiles that split the classes, the normal equations' integer
// sums per class, the filtered samples and each class's SSE gain, and the choice of the
// classes that stay on (the gain against lambda's price, the CPU's double arithmetic). The
// host solves the four 6x6 systems between the two halves (post_filter_taps(), the CPU's
// own code), so the host waits twice a plane and copies the plane up twice and down once.
// All sums are of integers (exact in any order), so the bytes do not depend on the order
// the device adds them in.
#pragma once
#include <cstdint>
#include <memory>

#include "codecs/mmp/postfilter.hpp"
#include "core/gpu.hpp"

namespace vfp::cuda {

// One plane at a time (the buffers grow to the largest plane seen); the caller keeps one per
// thread that designs filters at once.
class MmpPostFilter {
 public:
  MmpPostFilter();
  ~MmpPostFilter();
  MmpPostFilter(const MmpPostFilter&) = delete;
  MmpPostFilter& operator=(const MmpPostFilter&) = delete;
  // design_post_filter(rec, orig, w, h, lambda, out) on the calling thread's current device.
  // `out` receives the filtered plane (not aliasing rec). Throws vfp::Error (Gpu).
  mmp::PostFilter design(const uint8_t* rec, const uint8_t* orig, int w, int h, double lambda, uint8_t* out);

 private:
  struct Buffers;
  std::unique_ptr<Buffers> b_;
};

}  // namespace vfp::cuda
