// Profiling on the CUDA backend: GPU step times placed on the host clock agree with the
// host's own timestamps and with the events' durations, the trace nests, and copies
// overlap kernels.
#include <gtest/gtest.h>

#include "core/filter_parser.hpp"
#include "gpu_test_util.hpp"
#include "pipeline/engine.hpp"
#include "pipeline/profile.hpp"
#include "test_util.hpp"
#include "trace_check.hpp"

using namespace vfp;
using namespace vfp::test;

#if VFPIPE_HAVE_CUDA
TEST(GpuProfile, GpuSpansOnTheHostClock) {
  REQUIRE_GPU();
  FrameSpec spec{PixelFormat::YUV420P, 1920, 1080, {25, 1}};
  TestSource src(spec, 60);
  CaptureSink sink(0, false);
  Chain chain = Chain::build(build_stages("median,conv=gauss:size=5,wavelet=levels=2"), spec, {});
  sink.open(chain.output());
  EngineConfig cfg;
  cfg.backend = Backend::CUDA;
  cfg.depth = 3;
  cfg.warmup = 5;
  RunResult res = run_pipeline(src, chain, sink, cfg);
  ASSERT_FALSE(res.error);
  const RunReport& r = res.report;
  ASSERT_EQ(r.frames.size(), 60u);
  ASSERT_EQ(r.steps.size(), 5u);  // upload, 3 stages, download
  for (const auto& f : r.frames) {
    // Event resolution and the host's own stamps, plus the anchor's stated error: the GPU
    // may be busy with other processes (ctest -j) when the anchor is taken.
    EXPECT_LE(f.clock_error_ns, 2'000'000) << f.index;
    const int64_t slack = 200'000 + f.clock_error_ns;
    ASSERT_EQ(f.step_start_ns.size(), 5u);
    EXPECT_GE(f.step_start_ns[0], f.submit_ns - slack) << f.index;  // GPU work after its submission
    EXPECT_LE(f.step_end_ns[4], f.done_ns + slack) << f.index;      // and before the host saw it done
    for (size_t s = 0; s < 5; ++s) {
      EXPECT_NEAR((f.step_end_ns[s] - f.step_start_ns[s]) / 1e6, f.step_ms[s], 0.002) << f.index << " step " << s;
      if (s > 0) EXPECT_GE(f.step_start_ns[s], f.step_end_ns[s - 1] - 2000) << f.index << " step " << s;
    }
  }
  const ProfileSummary p = summarize_profile(r);
  EXPECT_EQ(p.counted, 55u);
  EXPECT_GE(p.hidden_copy_fraction, 0.0);
  EXPECT_LE(p.hidden_copy_fraction, 1.0);
  RecordProperty("hidden_copy_fraction", std::to_string(p.hidden_copy_fraction));
  EXPECT_EQ(check_nesting(nlohmann::json::parse(chrome_trace_json(r))), 55u * 9);
}
#else
TEST(GpuProfile, NotBuilt) { GTEST_SKIP() << "built without CUDA"; }
#endif
