#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "apps/vfpipe/progress.hpp"
#include "pipeline/stats.hpp"

using namespace vfp;

TEST(Stats, PercentilesInterpolateLikeNumpy) {
  // numpy.percentile([1,2,3,4,5,6,7,8,9,10], q): 50 -> 5.5, 90 -> 9.1, 95 -> 9.55, 99 -> 9.91
  Summary s = summarize({10, 9, 8, 7, 6, 5, 4, 3, 2, 1});
  EXPECT_EQ(s.count, 10u);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 10);
  EXPECT_DOUBLE_EQ(s.mean, 5.5);
  EXPECT_DOUBLE_EQ(s.p50, 5.5);
  EXPECT_NEAR(s.p90, 9.1, 1e-12);
  EXPECT_NEAR(s.p95, 9.55, 1e-12);
  EXPECT_NEAR(s.p99, 9.91, 1e-12);
  Summary one = summarize({4});
  EXPECT_DOUBLE_EQ(one.p99, 4);
  EXPECT_EQ(summarize({}).count, 0u);
}

TEST(Stats, ReportSkipsWarmupAndSerialises) {
  RunReport r;
  r.backend = "cpu";
  r.device = "CPU";
  r.steps = {"a", "b"};
  for (int i = 0; i < 5; ++i) {
    FrameRecord f;
    f.index = i;
    f.capture_ns = i * 1000000;
    f.output_ns = f.capture_ns + (i == 0 ? 100000000 : 2000000);  // first frame: 100 ms
    f.step_ms = {static_cast<float>(i == 0 ? 50 : 1), 0.5f};
    r.frames.push_back(f);
  }
  r.frames_out = 5;
  r.wall_s = 0.5;
  r.warmup = 1;
  EXPECT_DOUBLE_EQ(r.step_summary(0).max, 1.0);
  EXPECT_EQ(r.step_summary(0).count, 4u);
  EXPECT_NEAR(r.latency_summary().mean, 2.0, 1e-9);
  EXPECT_DOUBLE_EQ(r.fps(), 10.0);
  auto j = nlohmann::json::parse(r.json(true));
  EXPECT_EQ(j["frames_out"], 5);
  EXPECT_EQ(j["steps_ms"].size(), 2u);
  EXPECT_EQ(j["steps_ms"][0]["name"], "a");
  EXPECT_EQ(j["frames"].size(), 5u);
  EXPECT_FALSE(nlohmann::json::parse(r.json(false)).contains("frames"));
  std::string t = r.text();
  EXPECT_NE(t.find("end-to-end"), std::string::npos);
  EXPECT_NE(t.find("warm-up"), std::string::npos);
  EXPECT_EQ(t.find("in flight"), std::string::npos);  // one frame at a time (the CPU backend)
  r.backend = "cuda";
  r.depth = 8;
  EXPECT_NE(r.text().find("10.0 fps, backend cuda (CPU), 8 frames in flight\n"), std::string::npos) << r.text();
}

// The progress line: a bar with the share done, frames, fps, the speed against the stream's
// own rate (as ffmpeg's "speed=") and the time left.
TEST(Progress, LineShowsRateSpeedAndEta) {
  const std::string l = vfp::render_progress_line(50, 200, 0, 2.0, 100, 25.0);
  EXPECT_NE(l.find(" 25%"), std::string::npos) << l;
  EXPECT_NE(l.find("50/200 frames"), std::string::npos) << l;
  EXPECT_NE(l.find("25.0 fps"), std::string::npos) << l;
  EXPECT_NE(l.find("speed 1.00x"), std::string::npos) << l;
  EXPECT_NE(l.find("ETA 6s"), std::string::npos) << l;
  const std::string fast = vfp::render_progress_line(300, 0, 3, 2.0, 100, 50.0);
  EXPECT_NE(fast.find("speed 3.00x"), std::string::npos) << fast;
  EXPECT_NE(fast.find("3 dropped"), std::string::npos) << fast;
  EXPECT_EQ(vfp::render_progress_line(10, 0, 0, 1.0, 100).find("speed"), std::string::npos);  // rate unknown
}
