// A configured stage chain: the user's stages plus the format conversions the builder
// inserts (before a stage that does not accept its input format, and at the end for the
// sink), each with its input and output spec resolved.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/frame.hpp"
#include "core/stage.hpp"
#include "stages/builtin.hpp"

namespace vfp {

class Chain {
 public:
  struct Step {
    std::unique_ptr<Stage> stage;
    FrameSpec in, out;
    bool inserted = false;  // added by the builder, not written by the user
  };

  // `sink_formats`: formats the sink accepts, preferred first (empty: anything).
  // `forced_out`: --pix-fmt; the output is converted to it.
  static Chain build(std::vector<std::unique_ptr<Stage>> stages, const FrameSpec& input,
                     const std::vector<PixelFormat>& sink_formats, std::optional<PixelFormat> forced_out = std::nullopt,
                     const Registry& reg = registry());

  const FrameSpec& input() const { return input_; }
  const FrameSpec& output() const { return output_; }
  size_t size() const { return steps_.size(); }
  Step& step(size_t i) { return steps_[i]; }
  const Step& step(size_t i) const { return steps_[i]; }
  bool all_cuda() const;         // every non-passthrough step has a CUDA implementation
  std::string describe() const;  // "format(bgr24->yuv420p) -> null"

 private:
  std::vector<Step> steps_;
  FrameSpec input_, output_;
};

}  // namespace vfp
