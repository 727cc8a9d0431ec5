// Shared by the GPU tests: skip (never fail) where no GPU is usable; on a GPU host
// the device script fails the run if any GPU test skipped.
#pragma once
#include <gtest/gtest.h>

#if VFPIPE_HAVE_CUDA
#include <cstring>
#include <vector>

#include "core/gpu.hpp"

#define REQUIRE_GPU()                                                                                   \
  do {                                                                                                  \
    if (!::vfp::cuda::probe().usable) GTEST_SKIP() << "no usable GPU: " << ::vfp::cuda::probe().reason; \
  } while (0)

namespace vfp::test {

// One 8-bit plane on the device with a 256-byte pitch, as the pipeline lays them out.
struct DevPlane {
  int w, h, pitch;
  cuda::DeviceBuffer buf;
  DevPlane(int w_, int h_) : w(w_), h(h_), pitch((w_ + 255) / 256 * 256), buf(static_cast<size_t>(pitch) * h_) {}
  // `v`: w*h tightly packed samples.
  void upload(const std::vector<uint8_t>& v, cuda::StreamHandle s) {
    for (int y = 0; y < h; ++y)
      cuda::memcpy_h2d_async(buf.get() + static_cast<size_t>(y) * pitch, v.data() + static_cast<size_t>(y) * w,
                             static_cast<size_t>(w), s);
  }
  // Synchronises `s`; returns w*h tightly packed samples.
  std::vector<uint8_t> download(cuda::StreamHandle s) {
    std::vector<uint8_t> host(buf.size()), out(static_cast<size_t>(w) * h);
    cuda::memcpy_d2h_async(host.data(), buf.get(), host.size(), s);
    sync(s);
    for (int y = 0; y < h; ++y)
      std::memcpy(out.data() + static_cast<size_t>(y) * w, host.data() + static_cast<size_t>(y) * pitch,
                  static_cast<size_t>(w));
    return out;
  }
  static void sync(cuda::StreamHandle s) {
    cuda::Event e;
    e.record(s);
    e.synchronize();
  }
};

}  // namespace vfp::test
#endif
