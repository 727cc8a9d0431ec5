// The display: its pictures against the CPU's conversion and composition (every view that
// is exact, every pipeline format, odd sizes), headless (EGL) and in a window (Xvfb on
// CI), the display sink in the engine (frames pass through, screenshots decode), the live
// controls, and the PNG writer.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <random>
#include <thread>

#include "core/error.hpp"
#include "core/filter_parser.hpp"
#include "cpu/convert.hpp"
#include "display/controls.hpp"
#include "display/png.hpp"
#include "pipeline/engine.hpp"
#include "pipeline/profile.hpp"
#include "test_util.hpp"
#if VFPIPE_HAVE_CUDA
#include "core/gpu.hpp"
#endif
#if VFPIPE_HAVE_GL
#include "display/display.hpp"
#include "display/display_sink.hpp"
#endif
#if VFPIPE_HAVE_OPENCV
#include <opencv2/imgcodecs.hpp>
#endif

using namespace vfp;
using namespace vfp::test;

namespace {

// RGB rows of a frame by the CPU conversion (what the shader must reproduce).
std::vector<uint8_t> cpu_rgb(const HostFrame& f) {
  FrameSpec s = f.spec();
  s.format = PixelFormat::RGB24;
  HostFrame rgb(s, false);
  convert_cpu(f.view(), rgb.view(), f.spec().color);
  std::vector<uint8_t> out(static_cast<size_t>(s.width) * s.height * 3);
  for (int y = 0; y < s.height; ++y)
    std::memcpy(&out[static_cast<size_t>(y) * s.width * 3], rgb.view().row(0, y), static_cast<size_t>(s.width) * 3);
  return out;
}

}  // namespace

TEST(Png, WriterOutputDecodes) {
  const int w = 37, h = 300;  // > 64 KiB of scanlines: several stored blocks
  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
  std::mt19937 rng(3);
  for (auto& v : rgb) v = static_cast<uint8_t>(rng());
  const std::string path = tmp_path("w.png");
  write_png_rgb(path, w, h, rgb);
#if VFPIPE_HAVE_OPENCV
  cv::Mat m = cv::imread(path, cv::IMREAD_COLOR);
  ASSERT_EQ(m.cols, w);
  ASSERT_EQ(m.rows, h);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c)
        ASSERT_EQ(m.at<cv::Vec3b>(y, x)[2 - c], rgb[(static_cast<size_t>(y) * w + x) * 3 + c]) << x << "," << y;
#else
  GTEST_SKIP() << "no OpenCV to decode the PNG";
#endif
  EXPECT_THROW(write_png_rgb("/nonexistent-dir/x.png", w, h, rgb), Error);
}

TEST(LiveControls, AdjustAndApply) {
  FrameSpec spec{PixelFormat::GRAY8, 64, 48, {25, 1}};
  Chain chain = Chain::build(build_stages("median=radius=2,conv=gauss:size=5,wavelet"), spec, {});
  LiveControls c(chain);
  ASSERT_EQ(c.count(), 3u);
  EXPECT_EQ(c.describe(0), "median radius=2");
  EXPECT_EQ(c.adjust(+1), "median radius=3");
  c.select_next();
  EXPECT_EQ(c.adjust(+1), "conv kernel=sharpen");  // gauss -> sharpen; size etc. back to defaults
  c.select_next();
  EXPECT_EQ(c.adjust(+1), "wavelet threshold=8");
  EXPECT_EQ(c.adjust(+1), "wavelet threshold=10");
  // Nothing reaches the stages until the worker applies it.
  EXPECT_EQ(chain.step(0).stage->options().str("radius"), "2");
  EXPECT_TRUE(c.pending());
  c.apply(chain);
  EXPECT_FALSE(c.pending());
  EXPECT_EQ(chain.step(0).stage->options().str("radius"), "3");
  EXPECT_EQ(chain.step(1).stage->label(), "conv(sharpen 1)");
  EXPECT_EQ(chain.step(2).stage->label(), "wavelet(db4,fixed,soft)");
  c.select_next();  // wraps to median
  for (int i = 0; i < 200; ++i) c.adjust(-1);
  c.apply(chain);
  EXPECT_EQ(chain.step(0).stage->options().str("radius"), "1");  // clamped
  // T: off, then on again; applied between frames like the parameters.
  EXPECT_EQ(c.toggle(), "median radius=1 (off)");
  EXPECT_TRUE(c.pending());
  EXPECT_FALSE(chain.step(0).stage->bypassed());
  c.apply(chain);
  EXPECT_TRUE(chain.step(0).stage->bypassed());
  c.toggle();
  c.apply(chain);
  EXPECT_FALSE(chain.step(0).stage->bypassed());
  // Conversions are not listed (nothing to adjust, and switching one off would change the
  // format): only the median is.
  Chain conv = Chain::build(build_stages("format=gray,median"), FrameSpec{PixelFormat::YUV420P, 64, 48, {25, 1}}, {});
  LiveControls c2(conv);
  EXPECT_EQ(c2.count(), 1u);
  EXPECT_EQ(c2.describe(0), "median radius=1");
}

#if VFPIPE_HAVE_GL
namespace {
// CI (Xvfb + Mesa) requires both kinds; a GPU host without X (EGL) the headless one.
bool display_required(bool headless) {
  return std::getenv("VFPIPE_REQUIRE_DISPLAY") || (headless && std::getenv("VFPIPE_REQUIRE_HEADLESS"));
}

// A display of each kind that this machine can make; skips (or fails where the CI says a
// display must exist) otherwise.
std::unique_ptr<Display> make_display(bool headless, const DisplayOptions& base, const FrameSpec& a, const FrameSpec& b,
                                      std::string* why) {
  DisplayOptions o = base;
  o.headless = headless;
  if (!headless && !std::getenv("DISPLAY")) {
    *why = "no X display (DISPLAY unset)";
    return nullptr;
  }
  try {
    return Display::create(o, a, b);
  } catch (const Error& e) {
    *why = e.what();
    return nullptr;
  }
}

#define MAKE_DISPLAY(var, headless, opts, a, b)                                                    \
  std::string why_##var;                                                                           \
  auto var = make_display(headless, opts, a, b, &why_##var);                                       \
  if (!var) {                                                                                      \
    if (display_required(headless)) FAIL() << (headless ? "headless: " : "window: ") << why_##var; \
    GTEST_SKIP() << why_##var;                                                                     \
  }

// A run through a headless display sink that failed for want of a display: skip, or fail
// where one is required.
#define SKIP_IF_NO_HEADLESS_DISPLAY(result)           \
  if ((result).error) {                               \
    try {                                             \
      std::rethrow_exception((result).error);         \
    } catch (const Error& e) {                        \
      if (display_required(true)) FAIL() << e.what(); \
      GTEST_SKIP() << e.what();                       \
    }                                                 \
  }

void expect_views_exact(bool headless) {
  // Every format untagged (BT.601 at this size), and YUV tagged with other matrices and ranges.
  const std::pair<PixelFormat, ColorDesc> cases[] = {
      {PixelFormat::YUV420P, {}},
      {PixelFormat::GRAY8, {}},
      {PixelFormat::YUV444P, {}},
      {PixelFormat::BGR24, {}},
      {PixelFormat::RGB24, {}},
      {PixelFormat::YUV420P, {ColorMatrix::BT709, ColorRange::Full}},
      {PixelFormat::YUV444P, {ColorMatrix::BT2020, ColorRange::Limited}}};
  for (const auto& [fmt, colour] : cases) {
    FrameSpec spec{fmt, 67, 45, {25, 1}};
    spec.color = colour;
    HostFrame filtered(spec, false), original(spec, false);
    fill_random(filtered, 11);
    fill_random(original, 12);
    const auto fa = cpu_rgb(filtered), fb = cpu_rgb(original);
    // One display for the views of the frame's size, one for side by side (twice as wide).
    std::unique_ptr<Display> single;
    for (DisplayView view : {DisplayView::Filtered, DisplayView::Split, DisplayView::SideBySide}) {
      DisplayOptions o;
      o.view = view;
      o.hud = false;
      o.divider = 0.3f;  // no pixel centre falls on the divider line at 67 wide
      std::unique_ptr<Display> sbs;
      if (view != DisplayView::SideBySide && single) {
        single->set_view(view);
      } else {
        MAKE_DISPLAY(made, headless, o, spec, spec);
        (view == DisplayView::SideBySide ? sbs : single) = std::move(made);
      }
      Display* d = view == DisplayView::SideBySide ? sbs.get() : single.get();
      d->show(filtered, &original, {}, {});
      int w = 0, h = 0;
      const auto got = d->read_rgb(&w, &h);
      const int W = spec.width;
      ASSERT_EQ(w, view == DisplayView::SideBySide ? 2 * W : W);
      ASSERT_EQ(h, spec.height);
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) {
          const uint8_t* want;
          if (view == DisplayView::Filtered)
            want = &fa[(static_cast<size_t>(y) * W + x) * 3];
          else if (view == DisplayView::Split)
            want = x <= 19 ? &fb[(static_cast<size_t>(y) * W + x) * 3] : &fa[(static_cast<size_t>(y) * W + x) * 3];
          else
            want = x < W ? &fb[(static_cast<size_t>(y) * W + x) * 3] : &fa[(static_cast<size_t>(y) * W + x - W) * 3];
          const uint8_t* g = &got[(static_cast<size_t>(y) * w + x) * 3];
          ASSERT_TRUE(g[0] == want[0] && g[1] == want[1] && g[2] == want[2])
              << pix_fmt_name(fmt) << " view " << display_view_name(view) << " at " << x << "," << y << ": got "
              << int(g[0]) << " " << int(g[1]) << " " << int(g[2]) << ", want " << int(want[0]) << " " << int(want[1])
              << " " << int(want[2]) << " (" << d->renderer() << ")";
        }
    }
  }
}
}  // namespace

TEST(Display, HeadlessViewsEqualTheCpuConversion) { expect_views_exact(true); }
TEST(Display, WindowViewsEqualTheCpuConversion) { expect_views_exact(false); }

TEST(Display, HudAndHelpDrawText) {
  FrameSpec spec{PixelFormat::GRAY8, 320, 180, {25, 1}};
  HostFrame f(spec, false);
  std::memset(f.data(), 100, f.layout().total_bytes);
  DisplayOptions o;
  o.view = DisplayView::Filtered;
  MAKE_DISPLAY(d, true, o, spec, spec);
  d->show(f, nullptr, {}, {});
  int w = 0, h = 0;
  const auto plain = d->read_rgb(&w, &h);
  d->show(f, nullptr, {"VFPIPE 60.0 FPS"}, display_key_help());
  const auto text = d->read_rgb(&w, &h);
  size_t lit = 0, changed = 0;
  for (size_t i = 0; i < text.size(); i += 3) {
    changed += text[i] != plain[i];
    lit += text[i] == 255 && text[i + 1] == 255;  // glyph pixels are (255, 255, 217)
  }
  EXPECT_GT(lit, 500u);
  EXPECT_GT(changed, lit);  // plus the dark cell backgrounds
}

TEST(Display, SinkShowsPassesOnAndScreenshots) {
  FrameSpec spec{PixelFormat::YUV420P, 96, 64, {25, 1}};
  TestSource src(spec, 12);
  auto inner = std::make_unique<CaptureSink>();
  CaptureSink* cap = inner.get();
  DisplaySinkOptions o;
  o.display.headless = true;
  o.display.view = DisplayView::SideBySide;
  o.screenshot = tmp_path("shot_%d.png");
  o.screenshot_every = 4;
  DisplaySink sink(o, std::move(inner), nullptr);
  Chain chain = Chain::build(build_stages("median"), spec, sink.accepted_formats());
  sink.open(chain.output());
  RunResult r = run_pipeline(src, chain, sink, EngineConfig{});
  SKIP_IF_NO_HEADLESS_DISPLAY(r);
  EXPECT_EQ(cap->frames.size(), 12u);  // every frame reached the -o output
  EXPECT_EQ(sink.shown(), 12);
  // The profile knows when each frame was on screen.
  for (const auto& fr : r.report.frames) {
    EXPECT_GT(fr.display_ns, fr.capture_ns);
    EXPECT_LE(fr.display_ns, fr.output_ns);
  }
  const ProfileSummary p = summarize_profile(r.report);
  EXPECT_EQ(p.segments.back().name, "capture->display");
  EXPECT_EQ(p.segments.back().ms.count, 12u);
  for (int i : {3, 7, 11}) {
    const std::string p = tmp_path("shot_" + std::to_string(i) + ".png");
    EXPECT_TRUE(std::ifstream(p).good()) << p;
#if VFPIPE_HAVE_OPENCV
    cv::Mat m = cv::imread(p, cv::IMREAD_COLOR);
    EXPECT_EQ(m.cols, 192);
    EXPECT_EQ(m.rows, 64);
#endif
  }
}

// What a stage says about a frame (StageContext::note) reaches the HUD; the display names no
// stage: the mmp stage's bits and PSNR show up as its note.
TEST(Display, StageNotesReachTheHud) {
  FrameSpec spec{PixelFormat::YUV420P, 48, 32, {25, 1}};
  TestSource src(spec, 3);
  DisplaySinkOptions o;
  o.display.headless = true;
  DisplaySink sink(o, nullptr, nullptr);
  Chain chain = Chain::build(build_stages("mmp=lambda=40:tile=16"), spec, sink.accepted_formats());
  sink.open(chain.output());
  RunResult r = run_pipeline(src, chain, sink, EngineConfig{});
  SKIP_IF_NO_HEADLESS_DISPLAY(r);
  ASSERT_EQ(r.report.frames.size(), 3u);
  bool found = false;
  for (const std::string& l : sink.hud_lines())
    found = found || (l.rfind("MMP ", 0) == 0 && l.find(" BITS") != std::string::npos);
  EXPECT_TRUE(found) << "HUD without the mmp stage's note";
}

namespace {
// A camera looking at the display: each frame shows the patch level the display flipped to
// `latency_ms` before the frame's capture (white 230, black 20, noise), the whole frame.
class ScreenCamera : public Source {
 public:
  ScreenCamera(int frames, double period_ms, double latency_ms)
      : frames_(frames), period_ms_(period_ms), latency_ms_(latency_ms) {}
  FrameSpec spec() const override { return {PixelFormat::GRAY8, 64, 48, {250, 1}}; }
  std::string describe() const override { return "screen camera"; }
  bool read(HostFrame& f) override {
    if (n_++ >= frames_) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(period_ms_ * 1000)));
    const int64_t seen_at = now_ns() - static_cast<int64_t>(latency_ms_ * 1e6);
    bool white = false, any = false;
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (const auto& [t, w] : flips_)
        if (t <= seen_at) {
          white = w;
          any = true;
        }
    }
    std::normal_distribution<double> noise(0, 3);
    ImageView v = f.view();
    for (int y = 0; y < v.ph[0]; ++y)
      for (int x = 0; x < v.pw[0]; ++x)
        v.row(0, y)[x] = static_cast<uint8_t>(std::clamp((any && white ? 230.0 : 20.0) + noise(rng_), 0.0, 255.0));
    return true;
  }
  void flipped(int64_t t, bool white) {
    std::lock_guard<std::mutex> lk(mu_);
    flips_.push_back({t, white});
  }

 private:
  int frames_, n_ = 0;
  double period_ms_, latency_ms_;
  std::mutex mu_;
  std::vector<std::pair<int64_t, bool>> flips_;
  std::mt19937 rng_{5};
};
}  // namespace

TEST(Display, GlassToGlassLoopMeasuresTheLatency) {
  // Display flips every 80 ms; the "camera" sees the screen 25 ms late and captures every
  // 4 ms: a flip is measured at 25 ms + up to one capture period. (On a loaded machine a
  // late flip can follow the previous one closely, and the camera's 25 ms-old view may
  // already show the level: those few read short, so the bound is on most flips.)
  if (VFPIPE_ASAN) GTEST_SKIP() << "a timing test: meaningless under AddressSanitizer";
  ScreenCamera cam(260, 4, 25);
  DisplaySinkOptions o;
  o.display.headless = true;
  o.glass_to_glass = true;
  o.g2g_period_ms = 80;
  DisplaySink sink(o, nullptr, nullptr);
  sink.on_flip = [&](int64_t t, bool w) { cam.flipped(t, w); };
  Chain chain = Chain::build(build_stages("null"), cam.spec(), {});
  sink.open(chain.output());
  RunResult r = run_pipeline(cam, chain, sink, EngineConfig{});
  SKIP_IF_NO_HEADLESS_DISPLAY(r);
  const G2GResult& g = sink.glass_to_glass();
  ASSERT_GE(g.delays_ms.size(), 8u);
  EXPECT_LE(g.missed, 2);  // the last flip, after the camera stopped (and one under load)
  size_t in_range = 0;
  for (double d : g.delays_ms) in_range += d >= 25.0 - 0.5 && d <= 25.0 + 4 * 4;
  EXPECT_GE(in_range * 5, g.delays_ms.size() * 4) << "fewer than 80% of the flips at 25-41 ms";
  EXPECT_GE(g.ms.p50, 25.0 - 0.5);
  EXPECT_LE(g.ms.p50, 25.0 + 4 * 3);  // a capture period, plus the shared machine's scheduling
  EXPECT_NEAR(g.threshold, 125, 15);
}

namespace {
// Scripted presses through the real key handling: S saves a screenshot, R starts and stops
// a recording, + raises the selected stage's parameter (median radius 1 -> 2), T switches
// the stage off, Q quits. The output frames show each change taking effect in order: radius
// 1 before the key, then 2, then the unfiltered input (frames in flight keep theirs).
void keys_through_the_display(Backend backend) {
  FrameSpec spec{PixelFormat::GRAY8, 80, 60, {25, 1}};
  TestSource src(spec, 40);
  const std::string dir = tmp_path(std::string("keys_") + backend_name(backend));
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  DisplaySinkOptions o;
  o.display.headless = true;
  o.display.cuda_interop = backend == Backend::CUDA;
  o.save_dir = dir;
  auto inner = std::make_unique<CaptureSink>();
  CaptureSink* cap = inner.get();
  DisplaySink sink(o, std::move(inner), nullptr);
  Chain chain = Chain::build(build_stages("median=radius=1"), spec, sink.accepted_formats());
  LiveControls controls(chain);
  sink.set_controls(&controls);
  sink.set_source_spec(chain.input());
  sink.open(chain.output());
  sink.press_at(2, 'S');  // GLFW_KEY_S == 'S'
  sink.press_at(3, 'R');
  sink.press_at(8, 'R');   // 5 frames recorded: 3..7
  sink.press_at(10, '=');  // GLFW_KEY_EQUAL
  sink.press_at(16, 'T');
  sink.press_at(24, 'Q');
  EngineConfig cfg;
  cfg.backend = backend;
  cfg.before_frame = [&](int64_t, Chain& c) { controls.apply(c); };
  RunResult r = run_pipeline(src, chain, sink, cfg);
  SKIP_IF_NO_HEADLESS_DISPLAY(r);
  EXPECT_TRUE(std::ifstream(dir + "/vfpipe-shot-0001.png").good());
  std::ifstream rec(dir + "/vfpipe-rec-001.y4m", std::ios::binary);
  std::string y4m((std::istreambuf_iterator<char>(rec)), std::istreambuf_iterator<char>());
  size_t frames = 0;
  for (size_t p = y4m.find("FRAME"); p != std::string::npos; p = y4m.find("FRAME", p + 5)) ++frames;
  EXPECT_EQ(frames, 5u);
  EXPECT_EQ(chain.step(0).stage->options().str("radius"), "2");
  // Q stopped the source early: fewer than the 40 frames were read.
  EXPECT_LT(r.report.frames_in, 40);
  ASSERT_GE(cap->frames.size(), 24u);
  // Each output frame is the CPU median of radius 1 (state 0) or 2 (state 1) of its input,
  // or the input itself (state 2: switched off); the states only move forward.
  TestSource again(spec, 40);
  int last = 0;
  for (size_t i = 0; i < cap->frames.size(); ++i) {
    HostFrame in(spec, false);
    ASSERT_TRUE(again.read(in));
    int state = in.same_pixels(*cap->frames[i]) ? 2 : -1;
    for (int rr : {1, 2}) {
      HostFrame want(spec, false);
      auto st = build_stages("median=radius=" + std::to_string(rr));
      st[0]->configure(spec);
      st[0]->run_cpu(in.view(), want.view(), StageContext{});
      if (cap->frames[i]->same_pixels(want)) state = rr - 1;
    }
    ASSERT_NE(state, -1) << "frame " << i << " is none of radius 1, radius 2, unfiltered";
    if (i <= 10) EXPECT_EQ(state, 0) << "frame " << i << " changed before the key";
    if (i <= 16) EXPECT_LE(state, 1) << "frame " << i << " switched off before the key";
    EXPECT_GE(state, last) << "frame " << i;
    last = state;
  }
  EXPECT_EQ(last, 2) << "the stage was never switched off";
}
}  // namespace

TEST(Display, KeysScreenshotRecordParameterAndQuit) { keys_through_the_display(Backend::CPU); }

TEST(Display, KeysOnTheGpuPath) {
#if VFPIPE_HAVE_CUDA
  if (!cuda::probe().usable) GTEST_SKIP() << "no usable GPU";
  keys_through_the_display(Backend::CUDA);
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

TEST(Display, CliHeadlessRun) {
  const std::string bin = VFPIPE_BIN, pat = tmp_path("cli_%d.png");
  const CmdResult r = run_cmd(bin +
                              " run -i 'synthetic=size=160x90:frames=6' -f median --device cpu --no-progress "
                              "--display headless --screenshot " +
                              pat);
  if (r.rc != 0 && !display_required(true)) GTEST_SKIP() << r.out;
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("display: 6 frames shown"), std::string::npos) << r.out;
  EXPECT_TRUE(std::ifstream(tmp_path("cli_5.png")).good());
}
TEST(Display, CliWindowRunSplitView) {
  if (!std::getenv("DISPLAY")) {
    if (std::getenv("VFPIPE_REQUIRE_DISPLAY")) FAIL() << "DISPLAY unset (run under xvfb-run)";
    GTEST_SKIP() << "no X display";
  }
  // A noisy synthetic source, median-filtered, split view: the left part of the picture is
  // the noisy original, the right the filtered frame. The window's last frame is saved.
  const std::string bin = VFPIPE_BIN, pat = tmp_path("win_%d.png");
  const CmdResult r = run_cmd(bin +
                              " run -i 'synthetic=size=200x120:frames=5:noise=saltpepper:density=0.2' "
                              "-f median=radius=2 --device cpu --no-progress --display --vsync off --no-hud "
                              "--view split --screenshot " +
                              pat);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("display: 5 frames shown"), std::string::npos) << r.out;
#if VFPIPE_HAVE_OPENCV
  cv::Mat m = cv::imread(tmp_path("win_4.png"), cv::IMREAD_GRAYSCALE);
  ASSERT_EQ(m.cols, 200);
  ASSERT_EQ(m.rows, 120);
  // Salt and pepper: strong pixel-to-pixel jumps on the left, few on the (filtered) right;
  // rows below the colour bars.
  auto jumps = [&](int x0, int x1) {
    int n = 0;
    for (int y = 40; y < m.rows; ++y)
      for (int x = x0; x < x1 - 1; ++x) n += std::abs(m.at<uint8_t>(y, x) - m.at<uint8_t>(y, x + 1)) > 60;
    return n;
  };
  EXPECT_GT(jumps(0, 90), 10 * (jumps(110, 200) + 1));
#endif
}

// A window slower than the stream skips frames: the HUD's rate stays the stream's (averaging
// 1/dt over skipped frames microseconds apart would read ~195000 FPS), and --screenshot-every still
// saves exactly every N-th frame, skipped frames included.
TEST(Display, SkippedFramesKeepRateAndScreenshots) {
  const FrameSpec spec{PixelFormat::GRAY8, 64, 48, {25, 1}};
  const std::string dir = tmp_path("skip_shots");
  ASSERT_EQ(std::system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()), 0);
  DisplaySinkOptions o;
  o.display.headless = true;
  o.drop_when_behind = true;
  o.screenshot = dir + "/shot-%d.png";
  o.screenshot_every = 5;
  DisplaySink sink(o, nullptr, nullptr);
  sink.open(spec);
  RunResult r;
  try {
    sink.begin_stream();
  } catch (...) {
    r.error = std::current_exception();
  }
  SKIP_IF_NO_HEADLESS_DISPLAY(r);
  HostFrame f(spec, false);
  fill_random(f, 3);
  for (int i = 0; i < 40; ++i) {
    FrameRecord rec;
    rec.index = i;
    // Bursts: pairs of frames 0.1 ms apart, 20 ms between pairs (a 100 fps stream on
    // average); the first of each pair has a newer one waiting behind it.
    std::this_thread::sleep_for(std::chrono::microseconds(i % 2 ? 100 : 19900));
    OutFrame of{f, nullptr, &rec, nullptr, 0, static_cast<size_t>(i % 2 ? 0 : 1)};
    sink.write_frame(of);
  }
  EXPECT_GT(sink.skipped(), 10);
  EXPECT_GT(sink.hud_fps(), 50.0);
  EXPECT_LT(sink.hud_fps(), 200.0);
  for (int n = 5; n <= 40; n += 5)
    EXPECT_TRUE(std::filesystem::exists(dir + "/shot-" + std::to_string(n - 1) + ".png")) << "frame " << n - 1;
  sink.end_of_stream();
  sink.close();
}
#else
TEST(Display, NotBuilt) { GTEST_SKIP() << "built without GLFW/GLEW/EGL"; }
#endif
