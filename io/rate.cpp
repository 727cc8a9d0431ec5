#include "io/rate.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/log.hpp"

namespace vfp {

bool RateSlots::place(double t, int64_t* repeats, int64_t* slot) {
  // The nearest slot; a frame halfway between two takes the earlier (the later one is the
  // next frame's), so 50 frames/s at -r 25 keep the even frames. The margin absorbs rounding.
  const int64_t s = static_cast<int64_t>(std::ceil(t * rate_.num / rate_.den - 0.5 - 1e-6));
  if (first_) next_ = std::max<int64_t>(0, s), first_ = false;  // the output starts where the input does
  if (s < next_) {
    ++dropped_;
    return false;
  }
  *repeats = s - next_;
  duplicated_ += *repeats;
  *slot = s;
  next_ = s + 1;
  last_t_ = t;
  return true;
}

int64_t RateSlots::finish(double duration) {
  if (first_) return 0;
  const int64_t end = std::llround((last_t_ + duration) * rate_.num / rate_.den);
  const int64_t more = std::max<int64_t>(0, end - next_);
  duplicated_ += more;
  next_ += more;
  return more;
}

std::string RateSlots::summary() const {
  return log::format("-r %d/%d: %lld frames written, %lld duplicated, %lld dropped", rate_.num, rate_.den,
                     static_cast<long long>(next_), static_cast<long long>(duplicated_),
                     static_cast<long long>(dropped_));
}

namespace {

class RateSink final : public Sink {
 public:
  RateSink(std::unique_ptr<Sink> inner, Rational rate, FrameTime seconds_of)
      : inner_(std::move(inner)), slots_(rate), seconds_of_(std::move(seconds_of)) {}

  std::vector<PixelFormat> accepted_formats() const override { return inner_->accepted_formats(); }
  int64_t max_frames() const override { return inner_->max_frames(); }
  std::string describe() const override {
    return inner_->describe() + log::format(" at -r %d/%d", slots_.rate().num, slots_.rate().den);
  }

  void open(const FrameSpec& spec) override {
    in_fps_ = spec.fps;
    FrameSpec out = spec;
    out.fps = slots_.rate();
    inner_->open(out);
    last_ = std::make_unique<HostFrame>(spec, false);
  }

  void write(const HostFrame& f) override {
    const double t = seconds_of_(f.index, in_fps_);
    int64_t repeats = 0, slot = 0;
    if (!slots_.place(t, &repeats, &slot)) return;
    for (int64_t i = 0; i < repeats; ++i) {
      last_->index = slot - repeats + i;
      inner_->write(*last_);
    }
    std::memcpy(last_->data(), f.data(), f.layout().total_bytes);
    last_->index = slot;
    last_->capture_ns = f.capture_ns;
    inner_->write(*last_);
  }

  void close() override {
    if (closed_) return;
    closed_ = true;
    const int64_t more = slots_.finish(in_fps_.value() > 0 ? 1 / in_fps_.value() : 0);
    for (int64_t i = 0; i < more; ++i) {
      ++last_->index;
      inner_->write(*last_);
    }
    log::info("%s", slots_.summary().c_str());
    inner_->close();
  }

 private:
  std::unique_ptr<Sink> inner_;
  RateSlots slots_;
  FrameTime seconds_of_;
  std::unique_ptr<HostFrame> last_;  // the frame written last, for the slots that repeat it
  Rational in_fps_{25, 1};
  bool closed_ = false;
};

}  // namespace

std::unique_ptr<Sink> make_rate_sink(std::unique_ptr<Sink> inner, Rational rate, FrameTime seconds_of) {
  return std::make_unique<RateSink>(std::move(inner), rate, std::move(seconds_of));
}

}  // namespace vfp
