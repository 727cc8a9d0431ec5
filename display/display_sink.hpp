// The display as a sink: shows every frame (split/side-by-side/difference views need the
// chain's input too, which the engine hands it), draws the HUD, reacts to the keys, and
// passes the frames on to an optional inner sink (the -o output). All GL work happens on
// the engine's sink thread.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "display/display.hpp"
#include "pipeline/g2g.hpp"
#include "pipeline/source.hpp"

namespace vfp {

class LiveControls;

struct DisplaySinkOptions {
  DisplayOptions display;
  std::string screenshot;         // PNG path pattern with one %d (frame number); "" = none
  int screenshot_every = 0;       // every N frames; 0: the last frame only
  std::string filters;            // shown in the HUD
  bool drop_when_behind = false;  // skip showing a frame when newer ones wait (live: no added latency)
  // Glass-to-glass: a patch in the centre flips black/white every `g2g_period_ms`; the
  // camera (the chain's input) must see the screen; the delays are measured at the end.
  bool glass_to_glass = false;
  double g2g_period_ms = 250;
  std::string save_dir = ".";  // where the S and R keys write vfpipe-shot-N.png / vfpipe-rec-N.y4m
};

// The keys, for --help and the help overlay.
const std::vector<std::string>& display_key_help();

class DisplaySink final : public Sink {
 public:
  DisplaySink(DisplaySinkOptions opts, std::unique_ptr<Sink> inner, LiveControls* controls);
  ~DisplaySink() override;

  std::vector<PixelFormat> accepted_formats() const override;
  void open(const FrameSpec& spec) override;
  void write(const HostFrame& frame) override;
  void write_frame(const OutFrame& f) override;
  void begin_stream() override;
  void end_of_stream() override;
  DeviceTap* device_tap() override;
  // Frames shown from the GPU need no host copy, unless the -o output or a recording does.
  bool needs_host_frames() const override { return recording_.load() || (inner_ && inner_->needs_host_frames()); }
  // The chain's input format (the original in the split views); default: the output's.
  void set_source_spec(const FrameSpec& s) { source_spec_ = s; }
  void close() override;
  std::string describe() const override;
  bool wants_source() const override { return true; }
  // The live controls (made once the chain exists); keys +/- and TAB act on them.
  void set_controls(LiveControls* c) { controls_ = c; }

  // After the run: frames shown, frames skipped to keep up, mean show() time.
  int64_t shown() const { return shown_; }
  int64_t shown_from_device() const { return device_shown_; }
  int64_t skipped() const { return skipped_; }
  double mean_show_ms() const { return shown_ ? show_ms_ / static_cast<double>(shown_) : 0; }
  double mean_gpu_ms() const { return gpu_n_ ? gpu_ms_ / static_cast<double>(gpu_n_) : 0; }
  double mean_gpu_upload_ms() const { return gpu_n_ ? gpu_upload_ms_ / static_cast<double>(gpu_n_) : 0; }
  double mean_gpu_draw_ms() const { return gpu_n_ ? gpu_draw_ms_ / static_cast<double>(gpu_n_) : 0; }
  std::string renderer() const { return renderer_; }
  double hud_fps() const { return fps_; }  // the stream rate the HUD shows (last second)
  const std::vector<std::string>& hud_lines() const { return last_hud_; }  // as last drawn
  // A scripted key press (tests, demos): handled as if pressed just before frame `frame`
  // (0-based, in display order) is drawn. GLFW key codes.
  void press_at(int64_t frame, int key) { scripted_.push_back({frame, key}); }
  // Glass-to-glass results (after the run) and a hook called at each flip (tests).
  const G2GResult& glass_to_glass() const { return g2g_result_; }
  std::function<void(int64_t t_ns, bool white)> on_flip;

 private:
  void handle_keys(const DisplayInput& in, const HostFrame& frame);
  std::vector<std::string> hud(const OutFrame& f) const;
  void screenshot(const std::string& path);

  DisplaySinkOptions opt_;
  std::unique_ptr<Sink> inner_, recorder_;
  std::atomic<bool> recording_{false};
  LiveControls* controls_;
  std::unique_ptr<Display> display_;
  FrameSpec spec_{}, source_spec_{};
  std::mutex ready_mu_;
  std::condition_variable ready_cv_;
  bool ready_ = false;  // begin_stream() has run (the display exists, or failed)
  std::exception_ptr create_error_;
  bool paused_ = false, step_ = false, help_ = false, closed_ = false;
  int64_t shown_ = 0, skipped_ = 0, frames_ = 0, last_index_ = -1, device_shown_ = 0;
  double show_ms_ = 0, fps_ = 0, gpu_ms_ = 0, gpu_upload_ms_ = 0, gpu_draw_ms_ = 0;
  int64_t gpu_n_ = 0;
  std::deque<std::chrono::steady_clock::time_point> arrivals_;  // the last second's frames (HUD fps)
  std::string message_, renderer_;
  int shots_ = 0, recordings_ = 0;
  std::vector<std::string> last_hud_;
  std::vector<std::pair<int64_t, int>> scripted_;
  std::vector<G2GFlip> flips_;
  std::vector<G2GSample> samples_;
  G2GResult g2g_result_;
  int64_t g2g_start_ = 0;
  int patch_ = -1;
};

}  // namespace vfp
