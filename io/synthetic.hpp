// Synthetic source: a moving test scene (gradient, colour bars, a moving disk and a
// checkerboard) with optional Gaussian or salt-and-pepper noise, reproducible by seed.
//   -i "synthetic=size=1280x720:rate=30:frames=300:format=yuv420p:noise=gauss:sigma=20:seed=7"
// cache=N pre-renders N frames into pinned memory and cycles them with no copy (used by
// the engine benchmark, where rendering on the CPU would be the bottleneck).
#pragma once
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/parallel.hpp"
#include "core/stage.hpp"
#include "pipeline/source.hpp"

namespace vfp {

struct SyntheticParams {
  FrameSpec spec{PixelFormat::YUV420P, 640, 360, {25, 1}, {}};
  int64_t frames = 250;        // 0: endless
  std::string noise = "none";  // none | gauss | saltpepper
  double sigma = 15;           // gauss: standard deviation in 8-bit levels
  double density = 0.05;       // saltpepper: fraction of samples replaced by 0 or 255
  uint64_t seed = 1;
  int cache = 0;
  bool realtime = false;  // pace frames at the frame rate (a camera stand-in)
  bool pinned = false;    // cache in pinned memory (set by the CUDA backend)
};

const std::vector<OptionSpec>& synthetic_options();
// Parses "synthetic=..." (the part after "synthetic=" with the filter-string syntax).
SyntheticParams parse_synthetic(const std::string& text);

class SyntheticSource final : public Source {
 public:
  explicit SyntheticSource(const SyntheticParams& p);
  FrameSpec spec() const override { return p_.spec; }
  std::string describe() const override;
  int64_t frame_count() const override { return p_.frames > 0 ? p_.frames : -1; }
  bool is_live() const override { return p_.realtime; }
  bool read(HostFrame& dst) override;
  bool provides_frames() const override { return p_.cache > 0; }
  FramePtr next_frame() override;

  // Renders frame `t` into `dst` (deterministic in t and seed).
  void render(int64_t t, HostFrame& dst) const;

 private:
  void pace();
  SyntheticParams p_;
  int64_t next_ = 0;
  int64_t start_ns_ = 0;
  std::vector<FramePtr> cached_;
  std::vector<float> gauss_;                // N(0,1) samples, indexed by a hash of (seed, t, position)
  mutable std::unique_ptr<HostFrame> rgb_;  // render()'s BGR scene, allocated once
  std::unique_ptr<PoolShare> pool_;         // rendering leaves the engine's threads their cores
};

}  // namespace vfp
