// The display's GPU path: with the CUDA backend, frames go from the device buffers into
// pixel buffers registered with CUDA, never through the host; the picture must equal the
// one drawn from the CPU backend's host frames. Headless (EGL) where there is no X server.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

#include "core/filter_parser.hpp"
#include "gpu_test_util.hpp"
#include "pipeline/engine.hpp"
#include "test_util.hpp"
#if VFPIPE_HAVE_GL
#include "display/display_sink.hpp"
#endif

using namespace vfp;
using namespace vfp::test;

#if VFPIPE_HAVE_CUDA && VFPIPE_HAVE_GL
namespace {
struct Shown {
  std::vector<uint8_t> rgb;
  int w = 0, h = 0;
  int64_t shown = 0, from_device = 0;
  std::string error;
};

Shown render(Backend backend, PixelFormat fmt, DisplayView view, const std::string& filters, bool compose = true) {
  FrameSpec spec{fmt, 333, 187, {25, 1}};
  TestSource src(spec, 7);
  DisplaySinkOptions o;
  o.display.headless = true;
  o.display.view = view;
  o.display.hud = false;
  o.display.cuda_interop = backend == Backend::CUDA;
  o.display.cuda_compose = compose;
  o.screenshot = tmp_path(std::string("gpu_display_") + (backend == Backend::CUDA ? "cuda" : "cpu") + "_%d.png");
  DisplaySink sink(o, nullptr, nullptr);
  Chain chain = Chain::build(build_stages(filters), spec, {});
  sink.set_source_spec(chain.input());
  sink.open(chain.output());
  EngineConfig cfg;
  cfg.backend = backend;
  cfg.depth = 3;
  Shown r;
  RunResult res = run_pipeline(src, chain, sink, cfg);
  if (res.error) {
    try {
      std::rethrow_exception(res.error);
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    return r;
  }
  r.shown = sink.shown();
  r.from_device = sink.shown_from_device();
  // The last frame's screenshot. Our PNG encoder is deterministic, so equal pictures give
  // equal files (compared as bytes: no PNG decoder is needed).
  const std::string path =
      tmp_path(std::string("gpu_display_") + (backend == Backend::CUDA ? "cuda" : "cpu") + "_6.png");
  std::ifstream f(path, std::ios::binary);
  r.rgb.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  r.w = view == DisplayView::SideBySide ? 2 * spec.width : spec.width;
  r.h = spec.height;
  return r;
}
}  // namespace

TEST(GpuDisplay, CudaPathEqualsHostPathPicture) {
  REQUIRE_GPU();
  for (PixelFormat fmt : {PixelFormat::YUV420P, PixelFormat::GRAY8, PixelFormat::BGR24})
    for (DisplayView view : {DisplayView::Split, DisplayView::SideBySide}) {
      const std::string filters = fmt == PixelFormat::BGR24 ? "format=yuv444p,median" : "median=radius=2,conv=gauss";
      Shown cpu = render(Backend::CPU, fmt, view, filters);
      // Both GPU paths: CUDA composing the picture into the framebuffer, and PBOs + shader.
      for (bool compose : {true, false}) {
        Shown gpu = render(Backend::CUDA, fmt, view, filters, compose);
        if (!gpu.error.empty() || !cpu.error.empty()) {
          if (std::getenv("VFPIPE_REQUIRE_HEADLESS") || std::getenv("VFPIPE_REQUIRE_DISPLAY"))
            FAIL() << gpu.error << " / " << cpu.error;
          GTEST_SKIP() << gpu.error << " / " << cpu.error;
        }
        EXPECT_EQ(gpu.shown, 7);
        EXPECT_EQ(gpu.from_device, 7) << "every frame should come straight from CUDA";
        EXPECT_EQ(cpu.from_device, 0);
        ASSERT_GT(gpu.rgb.size(), 100u);  // a PNG was written
        EXPECT_TRUE(gpu.rgb == cpu.rgb) << pix_fmt_name(fmt) << " " << display_view_name(view)
                                        << (compose ? " composed" : " PBO") << ": the pictures differ";
      }
    }
}
TEST(GpuDisplay, OutputStillReachesTheHostSink) {
  REQUIRE_GPU();
  // With an -o output behind the display the frames are downloaded as usual (the display
  // alone would skip the download): the output equals the CPU backend's.
  FrameSpec spec{PixelFormat::YUV420P, 160, 90, {25, 1}};
  std::vector<std::shared_ptr<HostFrame>> got[2];
  for (int b = 0; b < 2; ++b) {
    TestSource src(spec, 9);
    auto inner = std::make_unique<CaptureSink>();
    CaptureSink* cap = inner.get();
    DisplaySinkOptions o;
    o.display.headless = true;
    o.display.cuda_interop = b == 0;
    DisplaySink sink(o, std::move(inner), nullptr);
    Chain chain = Chain::build(build_stages("median,conv=gauss"), spec, sink.accepted_formats());
    sink.set_source_spec(chain.input());
    sink.open(chain.output());
    EngineConfig cfg;
    cfg.backend = b == 0 ? Backend::CUDA : Backend::CPU;
    RunResult r = run_pipeline(src, chain, sink, cfg);
    if (r.error) {
      if (std::getenv("VFPIPE_REQUIRE_HEADLESS")) FAIL() << "display failed";
      GTEST_SKIP() << "no headless display";
    }
    if (b == 0) EXPECT_EQ(sink.shown_from_device(), 9);
    got[b] = cap->frames;
  }
  ASSERT_EQ(got[0].size(), 9u);
  ASSERT_EQ(got[1].size(), 9u);
  for (size_t i = 0; i < 9; ++i) EXPECT_TRUE(got[0][i]->same_pixels(*got[1][i])) << i;
}
#else
TEST(GpuDisplay, NotBuilt) { GTEST_SKIP() << "built without CUDA or GL"; }
#endif
