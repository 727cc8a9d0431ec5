// The engine on the CPU backend: ordering, no loss in batch mode, back-pressure, drop
// counting in live mode, errors and stop requests. (The CUDA backend runs the same
// scenarios in test_gpu.cpp.)
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/filter_parser.hpp"
#include "cpu/convert.hpp"
#include "pipeline/engine.hpp"
#include "test_util.hpp"

using namespace vfp;
using namespace vfp::test;

namespace {
RunResult run(Source& src, Sink& sink, const std::string& filters, EngineConfig cfg,
              std::vector<PixelFormat> sink_formats = {}) {
  Chain chain = Chain::build(build_stages(filters), src.spec(), sink_formats);
  sink.open(chain.output());
  return run_pipeline(src, chain, sink, cfg);
}
const FrameSpec kSpec{PixelFormat::YUV420P, 33, 17, {25, 1}};
}  // namespace

TEST(Engine, BatchKeepsOrderAndLosesNothing) {
  for (const char* filters : {"", "null", "format=yuv444p,format=yuv420p", "null,null"}) {
    TestSource src(kSpec, 200);
    CaptureSink sink(0, false);
    EngineConfig cfg;
    cfg.queue = 2;
    RunResult r = run(src, sink, filters, cfg);
    ASSERT_FALSE(r.error) << filters;
    ASSERT_EQ(sink.stamps.size(), 200u) << filters;
    for (uint32_t i = 0; i < 200; ++i) {
      ASSERT_EQ(sink.stamps[i], i) << filters;
      ASSERT_EQ(sink.indices[i], i);
    }
    EXPECT_EQ(r.report.frames_in, 200);
    EXPECT_EQ(r.report.frames_out, 200);
    EXPECT_EQ(r.report.dropped, 0);
    EXPECT_EQ(sink.closes, 1);
  }
}

TEST(Engine, StagesProduceTheReferenceResult) {
  TestSource src(kSpec, 5);
  CaptureSink sink;
  RunResult r = run(src, sink, "format=rgb24", EngineConfig{});
  ASSERT_FALSE(r.error);
  ASSERT_EQ(sink.frames.size(), 5u);
  TestSource again(kSpec, 5);
  for (int i = 0; i < 5; ++i) {
    HostFrame in(kSpec, false), want({PixelFormat::RGB24, 33, 17, {25, 1}}, false);
    ASSERT_TRUE(again.read(in));
    convert_cpu(in.view(), want.view());
    EXPECT_TRUE(sink.frames[i]->same_pixels(want)) << i;
  }
}

TEST(Engine, BackPressureBlocksTheSourceInBatchMode) {
  // A slow sink: the source must wait, never drop; queues never exceed their capacity.
  TestSource src(kSpec, 40);
  CaptureSink sink(3000, false);
  EngineConfig cfg;
  cfg.queue = 3;
  RunResult r = run(src, sink, "null", cfg);
  ASSERT_FALSE(r.error);
  EXPECT_EQ(sink.stamps.size(), 40u);
  EXPECT_EQ(r.report.dropped, 0);
  EXPECT_LE(r.report.input_queue_high_water, 3u);
  EXPECT_EQ(r.report.input_queue_high_water, 3u);  // it did fill up: the source was waiting
}

TEST(Engine, LivePolicyKeepsNewestAndCountsDrops) {
  TestSource src(kSpec, 300);     // as fast as possible
  CaptureSink sink(2000, false);  // 2 ms per frame
  EngineConfig cfg;
  cfg.policy = Policy::Live;
  cfg.queue = 2;
  RunResult r = run(src, sink, "null", cfg);
  ASSERT_FALSE(r.error);
  EXPECT_GT(r.report.dropped, 0);
  EXPECT_EQ(r.report.frames_in, 300);
  EXPECT_EQ(r.report.frames_out + r.report.dropped, 300);
  EXPECT_EQ(static_cast<int64_t>(sink.stamps.size()), r.report.frames_out);
  for (size_t i = 1; i < sink.stamps.size(); ++i) ASSERT_LT(sink.stamps[i - 1], sink.stamps[i]);
  EXPECT_EQ(sink.stamps.back(), 299u);  // the newest frame always gets through
}

TEST(Engine, SourceErrorKeepsFramesBeforeItAndClosesTheSink) {
  TestSource src(kSpec, 50);
  src.fail_at_ = 20;
  CaptureSink sink(0, false);
  RunResult r = run(src, sink, "null", EngineConfig{});
  ASSERT_TRUE(r.error);
  EXPECT_EQ(sink.stamps.size(), 20u);
  EXPECT_EQ(sink.closes, 1);
  try {
    std::rethrow_exception(r.error);
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "test source failure");
  }
}

TEST(Engine, SinkErrorStopsTheRun) {
  TestSource src(kSpec, 1000);
  CaptureSink sink(0, false);
  sink.fail_at = 10;
  RunResult r = run(src, sink, "null", EngineConfig{});
  ASSERT_TRUE(r.error);
  EXPECT_EQ(sink.stamps.size(), 10u);
  EXPECT_LT(r.report.frames_in, 1000);
  EXPECT_EQ(sink.closes, 1);
}

TEST(Engine, StopFlagFinishesCleanly) {
  TestSource src(kSpec, 1000000, 200);
  CaptureSink sink(0, false);
  std::atomic<int> stop{0};
  EngineConfig cfg;
  cfg.stop = &stop;
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    stop = 2;
  });
  RunResult r = run(src, sink, "null", cfg);
  t.join();
  ASSERT_FALSE(r.error);
  EXPECT_TRUE(r.report.interrupted);
  EXPECT_GT(sink.stamps.size(), 0u);
  EXPECT_EQ(static_cast<int64_t>(sink.stamps.size()), r.report.frames_in);  // nothing in flight lost
  EXPECT_EQ(sink.closes, 1);
}

// -re: frame n is read no earlier than n / fps after the first, so a live run of a file
// drops nothing when the chain keeps up; a stop is seen while the source waits.
TEST(Engine, PacedSourceReadsAtTheGivenRate) {
  TestSource src(kSpec, 11);
  CaptureSink sink(0, false);
  EngineConfig cfg;
  cfg.policy = Policy::Live;
  cfg.pace_fps = 100;
  RunResult r = run(src, sink, "null", cfg);
  ASSERT_FALSE(r.error);
  EXPECT_EQ(r.report.frames_out, 11);
  EXPECT_EQ(r.report.dropped, 0);
  ASSERT_EQ(r.report.frames.size(), 11u);
  const int64_t t0 = r.report.frames[0].read_ns;
  for (size_t n = 0; n < r.report.frames.size(); ++n)
    EXPECT_GE(r.report.frames[n].read_ns - t0, static_cast<int64_t>(n) * 10'000'000 - 100'000) << n;

  TestSource endless(kSpec, 1000000);
  CaptureSink sink2(0, false);
  std::atomic<int> stop{0};
  cfg.pace_fps = 0.5;  // two seconds between frames
  cfg.stop = &stop;
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    stop = 2;
  });
  const auto start = std::chrono::steady_clock::now();
  r = run(endless, sink2, "null", cfg);
  t.join();
  ASSERT_FALSE(r.error);
  EXPECT_EQ(r.report.frames_out, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1500));
}

// A source with timestamps (a variable frame rate: 100 frames/s for 5 frames, then 25) is
// played by them, not by its nominal rate.
TEST(Engine, PacedSourceFollowsTheFramesTimestamps) {
  class StampedSource : public TestSource {
   public:
    StampedSource() : TestSource(kSpec, 10) {}
    double time_of(int64_t i) const override { return 7.0 + (i < 5 ? 0.01 * i : 0.05 + 0.04 * (i - 5)); }
  } src;
  CaptureSink sink(0, false);
  EngineConfig cfg;
  cfg.policy = Policy::Live;
  cfg.pace_fps = 100;
  RunResult r = run(src, sink, "null", cfg);
  ASSERT_FALSE(r.error);
  ASSERT_EQ(r.report.frames.size(), 10u);
  const auto& f = r.report.frames;
  for (size_t n = 5; n < f.size(); ++n)
    EXPECT_GE(f[n].capture_ns - f[0].capture_ns, static_cast<int64_t>((0.05 + 0.04 * (n - 5)) * 1e9) - 100'000) << n;
  EXPECT_LT(f[4].capture_ns - f[0].capture_ns, 120'000'000);  // the first five at 100 frames/s (not 25)
}

// A sink paused like the display (it holds the source while it waits in write): under the
// live policy a paced file waits for it, its clock stopped, and loses nothing; a sink that
// does not hold drops the frames that come meanwhile.
class PausingSink : public CaptureSink {
 public:
  explicit PausingSink(bool hold) : CaptureSink(0, false), hold_(hold) {}
  void write(const HostFrame& f) override {
    CaptureSink::write(f);
    if (stamps.size() != 3) return;
    if (hold_) hold_source(true);
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    hold_source(false);
  }

 private:
  bool hold_;
};

TEST(Engine, PausedSinkHoldsAPacedSource) {
  for (bool hold : {true, false}) {
    TestSource src(kSpec, 12);
    PausingSink sink(hold);
    EngineConfig cfg;
    cfg.policy = Policy::Live;
    cfg.queue = 1;
    cfg.pace_fps = 50;  // 20 ms a frame: 20 frames' worth of pause
    RunResult r = run(src, sink, "null", cfg);
    ASSERT_FALSE(r.error);
    if (!hold) {
      EXPECT_GT(r.report.dropped, 0);
      continue;
    }
    EXPECT_EQ(r.report.frames_out, 12);
    EXPECT_EQ(r.report.dropped, 0);
    ASSERT_EQ(r.report.frames.size(), 12u);
    // The frames after the pause keep their spacing, shifted by the pause (not read at once).
    const auto& f = r.report.frames;
    for (size_t n = 6; n + 1 < f.size(); ++n) EXPECT_GE(f[n + 1].read_ns - f[n].read_ns, 15'000'000) << n;
    EXPECT_GE(f.back().read_ns - f.front().read_ns, 11 * 20'000'000 + 350'000'000);
  }
}

TEST(Engine, MaxFramesAndTimingRecords) {
  TestSource src(kSpec, 100);
  CaptureSink sink(0, false);
  EngineConfig cfg;
  cfg.max_frames = 7;
  RunResult r = run(src, sink, "format=gray", cfg);
  ASSERT_FALSE(r.error);
  EXPECT_EQ(r.report.frames_out, 7);
  ASSERT_EQ(r.report.steps.size(), 1u);
  EXPECT_EQ(r.report.steps[0], "format(yuv420p->gray)");
  for (const auto& f : r.report.frames) {
    EXPECT_LE(f.capture_ns, f.submit_ns);
    EXPECT_LE(f.submit_ns, f.done_ns);
    EXPECT_LE(f.done_ns, f.output_ns);
    EXPECT_EQ(f.step_ms.size(), 1u);
  }
}

TEST(Chain, InsertsConversionsForTheSink) {
  Chain c = Chain::build(build_stages("null"), {PixelFormat::BGR24, 9, 9, {25, 1}},
                         {PixelFormat::YUV420P, PixelFormat::GRAY8});
  EXPECT_EQ(c.output().format, PixelFormat::YUV420P);
  EXPECT_EQ(c.size(), 2u);
  EXPECT_TRUE(c.step(1).inserted);
  Chain forced = Chain::build(build_stages(""), {PixelFormat::BGR24, 9, 9, {25, 1}},
                              {PixelFormat::YUV420P, PixelFormat::GRAY8}, PixelFormat::GRAY8);
  EXPECT_EQ(forced.output().format, PixelFormat::GRAY8);
  EXPECT_THROW(
      Chain::build(build_stages(""), {PixelFormat::BGR24, 9, 9, {25, 1}}, {PixelFormat::YUV420P}, PixelFormat::RGB24),
      Error);
  // 16-bit frames: wavelet, median and conv take them as they are; mmp gets the same layout
  // at 8 bits; an 8-bit-only sink gets 8 bits.
  const FrameSpec s16{PixelFormat::YUV420P16, 9, 9, {25, 1}};
  Chain w16 = Chain::build(build_stages("wavelet=haar:levels=1,median,conv"), s16, {});
  ASSERT_EQ(w16.size(), 3u);
  EXPECT_EQ(w16.output().format, PixelFormat::YUV420P16);
  Chain c16 = Chain::build(build_stages("mmp,wavelet=haar:levels=1"), s16, {PixelFormat::BGR24});
  ASSERT_EQ(c16.size(), 4u);
  EXPECT_EQ(c16.step(0).out.format, PixelFormat::YUV420P);
  EXPECT_EQ(c16.step(2).in.format, PixelFormat::YUV420P);
  EXPECT_EQ(c16.output().format, PixelFormat::BGR24);
  // Before a stage: the accepted format that keeps the most (colour -> yuv444p, not gray).
  Chain med = Chain::build(build_stages("median"), {PixelFormat::BGR24, 9, 9, {25, 1}}, {});
  ASSERT_EQ(med.size(), 2u);
  EXPECT_EQ(med.step(0).out.format, PixelFormat::YUV444P);
  EXPECT_TRUE(med.step(0).inserted);
  Chain med420 = Chain::build(build_stages("median"), {PixelFormat::YUV420P, 9, 9, {25, 1}}, {});
  EXPECT_EQ(med420.size(), 1u);
  Chain same =
      Chain::build(build_stages(""), {PixelFormat::GRAY8, 9, 9, {25, 1}}, {PixelFormat::YUV420P, PixelFormat::GRAY8});
  EXPECT_EQ(same.size(), 0u);
}
