#include "display/display_sink.hpp"

#include <algorithm>

#include <GLFW/glfw3.h>

#include <thread>

#include "core/error.hpp"
#include "core/log.hpp"
#include "display/controls.hpp"
#include "display/png.hpp"
#include "io/open.hpp"
#include "pipeline/stats.hpp"

namespace vfp {

const std::vector<std::string>& display_key_help() {
  static const std::vector<std::string> k = {
      "KEYS",
      "ESC Q      QUIT (OUTPUT FILES ARE CLOSED PROPERLY)",
      "SPACE      PAUSE / RESUME",
      "N          NEXT FRAME WHILE PAUSED",
      "1 2 3 4    VIEW: FILTERED, SPLIT, SIDE BY SIDE, DIFFERENCE",
      "DRAG       MOVE THE SPLIT DIVIDER",
      "TAB        SELECT THE NEXT STAGE",
      "T          SWITCH IT OFF / ON",
      "+ -        ITS MAIN PARAMETER (MEDIAN RADIUS, CONV PRESET, WAVELET THRESHOLD)",
      "S          SCREENSHOT (PNG)",
      "R          START / STOP RECORDING (Y4M)",
      "H          HUD ON / OFF",
      "F1 ?       THIS HELP",
  };
  return k;
}

DisplaySink::DisplaySink(DisplaySinkOptions opts, std::unique_ptr<Sink> inner, LiveControls* controls)
    : opt_(std::move(opts)), inner_(std::move(inner)), controls_(controls) {}

DisplaySink::~DisplaySink() = default;

std::vector<PixelFormat> DisplaySink::accepted_formats() const {
  // The display draws 8-bit frames: a 16-bit chain output is converted before it (and so
  // before the file it also writes).
  std::vector<PixelFormat> f = inner_ ? inner_->accepted_formats() : std::vector<PixelFormat>{};
  if (f.empty())
    f = {PixelFormat::YUV420P, PixelFormat::YUV444P, PixelFormat::GRAY8, PixelFormat::BGR24, PixelFormat::RGB24};
  f.erase(std::remove_if(f.begin(), f.end(), [](PixelFormat x) { return is_16bit(x); }), f.end());
  return f;
}

void DisplaySink::open(const FrameSpec& spec) {
  spec_ = spec;
  if (inner_) inner_->open(spec);
}

std::string DisplaySink::describe() const {
  std::string d = opt_.display.headless ? "display (headless)" : "display";
  return inner_ ? d + " + " + inner_->describe() : d;
}

void DisplaySink::write(const HostFrame& frame) { write_frame(OutFrame{frame}); }

std::vector<std::string> DisplaySink::hud(const OutFrame& f) const {
  std::vector<std::string> l;
  l.push_back(log::format("VFPIPE  %.1f FPS  DROPPED %lld  DISPLAY %.2f MS%s%s", fps_,
                          static_cast<long long>(f.dropped), display_ ? display_->last_show_ms() : 0.0,
                          paused_ ? "  PAUSED" : "", recorder_ ? "  REC" : ""));
  if (f.record && f.steps)
    for (size_t i = 0; i < f.steps->size() && i < f.record->step_ms.size(); ++i)
      l.push_back(log::format("%-28.28s %7.3f MS", (*f.steps)[i].c_str(), f.record->step_ms[i]));
  if (f.record)
    for (const std::string& note : f.record->notes)  // what stages said about this frame
      if (!note.empty()) l.push_back(note.substr(0, 70));
  if (f.record) l.push_back(log::format("CAPTURE TO DISPLAY  %.1f MS", (now_ns() - f.record->capture_ns) / 1e6));
  if (!opt_.filters.empty()) l.push_back("FILTERS " + opt_.filters.substr(0, 70));
  if (controls_ && controls_->count() > 0) l.push_back("TAB +/-  " + controls_->describe(controls_->selected()));
  l.push_back(log::format("VIEW %s   F1 HELP", display_view_name(display_ ? display_->view() : opt_.display.view)));
  if (!message_.empty()) l.push_back(message_);
  return l;
}

void DisplaySink::screenshot(const std::string& path) {
  int w = 0, h = 0;
  std::vector<uint8_t> rgb = display_->read_rgb(&w, &h);
  write_png_rgb(path, w, h, rgb);
  message_ = "SAVED " + path;
  log::info("display: screenshot %s (%dx%d)", path.c_str(), w, h);
}

void DisplaySink::handle_keys(const DisplayInput& in, const HostFrame& frame) {
  if (in.close) {
    closed_ = true;
    request_stop();
    return;
  }
  for (int k : in.keys) {
    switch (k) {
      case GLFW_KEY_ESCAPE:
      case GLFW_KEY_Q:
        closed_ = true;
        request_stop();
        return;
      case GLFW_KEY_SPACE:
        paused_ = !paused_;
        break;
      case GLFW_KEY_N:
      case GLFW_KEY_RIGHT:
        step_ = true;
        break;
      case GLFW_KEY_1:
        display_->set_view(DisplayView::Filtered);
        break;
      case GLFW_KEY_2:
        display_->set_view(DisplayView::Split);
        break;
      case GLFW_KEY_3:
        display_->set_view(DisplayView::SideBySide);
        break;
      case GLFW_KEY_4:
        display_->set_view(DisplayView::Difference);
        break;
      case GLFW_KEY_H:
        opt_.display.hud = !opt_.display.hud;
        break;
      case GLFW_KEY_F1:
      case GLFW_KEY_SLASH:
        help_ = !help_;
        break;
      case GLFW_KEY_TAB:
        if (controls_) controls_->select_next();
        break;
      case GLFW_KEY_T:
        if (controls_) message_ = controls_->toggle();
        break;
      case GLFW_KEY_EQUAL:
      case GLFW_KEY_KP_ADD:
      case GLFW_KEY_UP:
        if (controls_) message_ = controls_->adjust(+1);
        break;
      case GLFW_KEY_MINUS:
      case GLFW_KEY_KP_SUBTRACT:
      case GLFW_KEY_DOWN:
        if (controls_) message_ = controls_->adjust(-1);
        break;
      case GLFW_KEY_S:
        screenshot(log::format("%s/vfpipe-shot-%04d.png", opt_.save_dir.c_str(), ++shots_));
        break;
      case GLFW_KEY_R:
        if (recorder_) {
          recording_ = false;
          recorder_->close();
          recorder_.reset();
          message_ = "RECORDING STOPPED";
        } else if (is_planar_yuv(frame.spec().format)) {
          const std::string path = log::format("%s/vfpipe-rec-%03d.y4m", opt_.save_dir.c_str(), ++recordings_);
          recorder_ = open_sink(path, SinkOptions{});
          recorder_->open(frame.spec());
          // Frames already in flight without a host copy are not recorded; the next are.
          recording_ = true;
          message_ = "RECORDING " + path;
        } else {
          message_ = "RECORDING NEEDS A YUV OR GRAY OUTPUT (Y4M)";
        }
        break;
      default:
        break;
    }
  }
}

void DisplaySink::write_frame(const OutFrame& f) {
  // A frame the GPU path carried has a host copy only if someone needed it when it was
  // submitted (needs_host_frames).
  const bool host_valid = f.device_slot < 0 || f.host_valid;
  if (inner_ && host_valid) inner_->write(f.frame);
  if (recorder_ && host_valid) recorder_->write(f.frame);
  if (closed_) {  // the window is gone; frames still in flight are only passed on
    if (f.device_slot >= 0 && display_) display_->release_slot(f.device_slot);
    return;
  }
  ++frames_;
  // The stream's rate: frames arrived over the last second. (An average of 1/dt between
  // arrivals exploded when frames queued behind a slow window arrived microseconds apart.)
  const auto now = std::chrono::steady_clock::now();
  arrivals_.push_back(now);
  while (arrivals_.size() > 2 && now - arrivals_.front() > std::chrono::seconds(1)) arrivals_.pop_front();
  if (arrivals_.size() >= 2) {
    const double span = std::chrono::duration<double>(arrivals_.back() - arrivals_.front()).count();
    if (span > 0) fps_ = (arrivals_.size() - 1) / span;
  }
  if (!display_) begin_stream();
  if (!display_) std::rethrow_exception(create_error_);
  // Glass-to-glass: the camera's view of the patch (the chain's input) at its capture time,
  // for every frame, shown or not.
  if (opt_.glass_to_glass && f.source && f.record)
    samples_.push_back({f.record->capture_ns, patch_luma(f.source->view(), 0.5)});
  // Newer frames are already waiting: show those instead (the display adds no latency
  // when it is slower than the stream; headless renders every frame), except a frame due
  // for a --screenshot-every screenshot, which is shown and saved whatever the backlog.
  const bool screenshot_due =
      !opt_.screenshot.empty() && opt_.screenshot_every > 0 && frames_ % opt_.screenshot_every == 0;
  if (opt_.drop_when_behind && f.backlog > 0 && !paused_ && !screenshot_due) {
    if (f.device_slot >= 0) display_->release_slot(f.device_slot);
    ++skipped_;
    return;
  }
  int flip_to = -1;  // glass-to-glass: the level this frame's picture switches the patch to
  if (opt_.glass_to_glass) {
    if (g2g_start_ == 0) g2g_start_ = now_ns();
    const int level = static_cast<int>(((now_ns() - g2g_start_) / static_cast<int64_t>(opt_.g2g_period_ms * 1e6)) % 2);
    if (level != patch_) {
      display_->set_patch(level);
      flip_to = level;
    }
  }
  {
    DisplayInput scripted;
    for (auto it = scripted_.begin(); it != scripted_.end();)
      if (it->first <= frames_ - 1) {
        scripted.keys.push_back(it->second);
        it = scripted_.erase(it);
      } else {
        ++it;
      }
    if (!scripted.keys.empty()) handle_keys(scripted, f.frame);
    if (closed_) return;
  }
  last_hud_ = hud(f);
  const auto& overlay = help_ ? display_key_help() : std::vector<std::string>{};
  // The filtered view does not look at the original: no need to upload it.
  const bool with_source = f.source != nullptr && display_->view() != DisplayView::Filtered;
  if (f.device_slot >= 0) {
    display_->show_device(f.device_slot, with_source, last_hud_, overlay);
    ++device_shown_;
  } else {
    display_->show(f.frame, with_source ? f.source : nullptr, last_hud_, overlay);
  }
  ++shown_;
  if (f.record) f.record->display_ns = now_ns();
  if (flip_to >= 0) {
    // The new level is on screen once show() returned (swap or finish). The first patch
    // replaces the video, not the other level: not a flip.
    const int64_t t = now_ns();
    if (patch_ >= 0) {
      flips_.push_back({t, flip_to == 1});
      if (on_flip) on_flip(t, flip_to == 1);
    }
    patch_ = flip_to;
  }
  show_ms_ += display_->last_show_ms();
  if (display_->last_gpu_ms() > 0) {
    double up = 0, dr = 0;
    display_->last_gpu_split(&up, &dr);
    gpu_ms_ += display_->last_gpu_ms();
    gpu_upload_ms_ += up;
    gpu_draw_ms_ += dr;
    ++gpu_n_;
  }
  last_index_ = f.record ? f.record->index : frames_ - 1;
  if (screenshot_due) screenshot(log::format(opt_.screenshot.c_str(), static_cast<int>(last_index_)));
  handle_keys(display_->poll(), f.frame);
  // Paused: keep drawing and listening. The stream waits (batch; a paced file, which the
  // source holds back) or drops (a camera, live). A step releases the source for one frame.
  while (paused_ && !step_ && !closed_) {
    hold_source(true);
    std::this_thread::sleep_for(std::chrono::milliseconds(15));
    last_hud_ = hud(f);
    display_->redraw(last_hud_, help_ ? display_key_help() : std::vector<std::string>{});
    handle_keys(display_->poll(), f.frame);
  }
  hold_source(false);
  step_ = false;
}

void DisplaySink::begin_stream() {
  if (display_) return;
  try {
    const FrameSpec src = source_spec_.width > 0 ? source_spec_ : spec_;
    display_ = Display::create(opt_.display, spec_, src);
    renderer_ = display_->renderer();
    log::info("display: %s%s", renderer_.c_str(), display_->device_tap() ? " (frames from CUDA through PBOs)" : "");
  } catch (...) {
    create_error_ = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lk(ready_mu_);
    ready_ = true;
  }
  ready_cv_.notify_all();
  if (create_error_) std::rethrow_exception(create_error_);
}

DeviceTap* DisplaySink::device_tap() {
  std::unique_lock<std::mutex> lk(ready_mu_);
  ready_cv_.wait(lk, [&] { return ready_; });
  return display_ ? display_->device_tap() : nullptr;
}

void DisplaySink::end_of_stream() {
  if (opt_.glass_to_glass) {
    g2g_result_ = analyze_glass_to_glass(flips_, samples_);
    const G2GResult& r = g2g_result_;
    log::info(
        "glass-to-glass: %zu flips measured, %d not seen; delay ms min %.1f, p50 %.1f, mean %.1f, p95 %.1f, "
        "max %.1f (patch luma threshold %.0f)",
        r.delays_ms.size(), r.missed, r.ms.min, r.ms.p50, r.ms.mean, r.ms.p95, r.ms.max, r.threshold);
  }
  if (display_ && !opt_.screenshot.empty() && opt_.screenshot_every == 0)
    screenshot(log::format(opt_.screenshot.c_str(), static_cast<int>(last_index_)));
  display_.reset();  // GL objects and the context go with the thread that made them
}

void DisplaySink::close() {
  if (recorder_) {
    recorder_->close();
    recorder_.reset();
  }
  if (inner_) inner_->close();
}

}  // namespace vfp
