// The live display: an OpenGL 3.3 core renderer of the pipeline's frames, in a GLFW window
// or headless (EGL, an offscreen framebuffer; screenshots as PNG). Frames arrive as planes
// uploaded through two alternating pixel buffer objects (CUDA fills them directly on the GPU
// path; from host memory here) and are drawn by shaders/display.frag, which converts YUV to
// RGB exactly as the CPU does and composes the views. HUD and help text: shaders/text.*.
//
// All methods must be called from one thread (the one that created the display).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/frame.hpp"
#include "pipeline/source.hpp"

namespace vfp {

enum class DisplayView { Filtered = 0, Split = 1, SideBySide = 2, Difference = 3 };
bool parse_display_view(const std::string& s, DisplayView* v);
const char* display_view_name(DisplayView v);

struct DisplayOptions {
  bool headless = false;  // EGL + offscreen framebuffer instead of a window
  bool vsync = true;      // window: wait for the display's refresh on swap
  DisplayView view = DisplayView::Split;
  int width = 0, height = 0;  // window / framebuffer size; 0: the frame's (twice as wide side by side)
  float divider = 0.5f;       // split view: where the divider starts
  float diff_gain = 4.f;      // difference view: |filtered - original| x gain
  bool hud = true;
  std::string title = "vfpipe";
  bool cuda_interop = false;  // register pixel buffers with CUDA (the CUDA backend's path)
  bool cuda_compose = true;   // with interop: CUDA composes the picture into the framebuffer
                              // (no GL texture upload or full-screen draw); false: PBOs + shader
};

// Keys and mouse actions the display saw since the last call (GLFW key codes).
struct DisplayInput {
  std::vector<int> keys;  // pressed
  bool close = false;     // window closed
};

class Display {
 public:
  // Throws vfp::Error when no GL context can be made (no display, no EGL, too old GL).
  static std::unique_ptr<Display> create(const DisplayOptions& opts, const FrameSpec& filtered,
                                         const FrameSpec& original);
  virtual ~Display() = default;

  // Uploads the frames (original may be null: the filtered frame is shown in every view)
  // and draws them with `text` (HUD lines, top left) and `overlay` (help, centred; may be
  // empty). Presents (window) or renders into the framebuffer (headless).
  virtual void show(const HostFrame& filtered, const HostFrame* original, const std::vector<std::string>& text,
                    const std::vector<std::string>& overlay) = 0;
  // The GPU path (cuda_interop): the worker thread's tap, or null when interop is off or
  // failed; show_device() draws the frames a tap slot holds and frees it; release_slot()
  // frees one without drawing it.
  virtual DeviceTap* device_tap() = 0;
  virtual void show_device(int slot, bool with_source, const std::vector<std::string>& text,
                           const std::vector<std::string>& overlay) = 0;
  virtual void release_slot(int slot) = 0;
  // Redraws the last frames with new text (pause, help toggled) and processes events.
  virtual void redraw(const std::vector<std::string>& text, const std::vector<std::string>& overlay) = 0;
  virtual DisplayInput poll() = 0;
  // The last drawn picture as RGB rows, top first.
  virtual std::vector<uint8_t> read_rgb(int* width, int* height) = 0;
  virtual void set_view(DisplayView v) = 0;
  // Glass-to-glass pattern: -1 none, 0 black, 1 white patch over the centre half.
  virtual void set_patch(int level) = 0;
  virtual DisplayView view() const = 0;
  virtual std::string renderer() const = 0;  // GL_RENDERER, GL_VERSION
  // Milliseconds the last show() spent (upload + draw + present), host clock.
  virtual double last_show_ms() const = 0;
  // GPU milliseconds of an earlier show()'s upload and draw (GL timer query; 0 until known).
  virtual double last_gpu_ms() const = 0;
  // The same, split into texture upload (incl. the GPU path's buffer copies) and drawing.
  virtual void last_gpu_split(double* upload_ms, double* draw_ms) const = 0;
};

}  // namespace vfp
