// -r: a constant output frame rate made from the frames' own times, as ffmpeg's
// constant-rate output does it (without its drift). Output frame n shows at n / rate; a frame
// takes the slot nearest its time; slots before it that no frame took repeat the frame before
// (duplicated); a frame whose slot was already taken is left out (dropped); the last frame
// lasts its input duration.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/frame.hpp"
#include "pipeline/source.hpp"

namespace vfp {

class RateSlots {
 public:
  explicit RateSlots(Rational rate) : rate_(rate) {}
  // The frame at `t` seconds: false when it is dropped; otherwise the previous frame is
  // written `*repeats` more times first, and this frame goes into slot `*slot`.
  bool place(double t, int64_t* repeats, int64_t* slot);
  // After the last frame (the last one placed, lasting `duration` seconds): how many more
  // times it is written.
  int64_t finish(double duration);
  int64_t next_slot() const { return next_; }  // the slot after the last one filled
  Rational rate() const { return rate_; }
  // "-r 30/1: 120 frames written, 3 duplicated, 0 dropped"
  std::string summary() const;

 private:
  Rational rate_;
  bool first_ = true;
  int64_t next_ = 0, duplicated_ = 0, dropped_ = 0;
  double last_t_ = 0;  // the time of the last frame placed
};

// Wraps a sink that has no timestamps of its own (Y4M, image sequences): its frames come out
// at `rate`, its header says `rate`. `seconds_of(index, input_fps)` is a frame's time from
// the start.
using FrameTime = std::function<double(int64_t index, Rational input_fps)>;
std::unique_ptr<Sink> make_rate_sink(std::unique_ptr<Sink> inner, Rational rate, FrameTime seconds_of);

}  // namespace vfp
