// Latency profiling: interval arithmetic and the overlap fraction, statistics against
// hand-computed values, warm-up and bounded records, the Chrome trace (valid JSON, properly
// nested events per track), the HTML report (rendered by headless Chromium where present),
// profile comparison, and the CLI.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "core/filter_parser.hpp"
#include "pipeline/engine.hpp"
#include "pipeline/profile.hpp"
#include "test_util.hpp"
#include "trace_check.hpp"
#if VFPIPE_HAVE_OPENCV
#include <opencv2/imgcodecs.hpp>
#endif

using namespace vfp;
using namespace vfp::test;
using nlohmann::json;

namespace {

// A CUDA-shaped report written by hand: per frame an upload [0,2), a kernel [2,5) and a
// download [5,6) ms after its start, frames started every 3 ms (so the next upload runs
// under this frame's kernel).
RunReport hand_report(int frames, int warmup) {
  RunReport r;
  r.backend = "cuda";
  r.device = "test";
  r.chain = "k";
  r.steps = {"upload (H2D)", "k", "download (D2H)"};
  r.step_tracks = {"CUDA upload stream", "CUDA compute stream", "CUDA download stream"};
  r.step_copy = {true, false, true};
  r.warmup = warmup;
  const int64_t ms = 1'000'000;
  for (int i = 0; i < frames; ++i) {
    FrameRecord f;
    f.index = i;
    const int64_t t = 3 * ms * i;
    f.read_ns = t - ms;
    f.capture_ns = t;
    f.enqueue_ns = t;
    f.submit_ns = t;
    f.launched_ns = t + ms / 10;
    f.done_ns = t + 6 * ms;
    f.write_ns = t + 6 * ms;
    f.output_ns = t + 7 * ms + i * ms / 10;  // e2e 7.0, 7.1, 7.2, ... ms
    f.step_start_ns = {t, t + 2 * ms, t + 5 * ms};
    f.step_end_ns = {t + 2 * ms, t + 5 * ms, t + 6 * ms};
    f.step_ms = {2.f, 3.f, 1.f};
    r.frames.push_back(f);
  }
  r.frames_in = r.frames_out = frames;
  return r;
}

}  // namespace

TEST(Profile, IntervalArithmetic) {
  EXPECT_EQ(union_length({{0, 10}, {5, 15}, {20, 25}, {24, 24}}), 20);
  EXPECT_EQ(union_length({}), 0);
  EXPECT_EQ(intersection_length({{0, 10}, {20, 30}}, {{5, 25}}), 10);
  EXPECT_EQ(intersection_length({{0, 10}}, {{10, 20}}), 0);
  EXPECT_EQ(intersection_length({{0, 10}, {2, 4}}, {{0, 3}, {1, 2}}), 3);  // unions first
}

TEST(Profile, StatisticsAndOverlapByHand) {
  RunReport r = hand_report(12, 2);
  ProfileSummary p = summarize_profile(r);
  EXPECT_EQ(p.counted, 10u);
  ASSERT_EQ(p.steps.size(), 3u);
  EXPECT_DOUBLE_EQ(p.steps[1].ms.p50, 3.0);
  EXPECT_TRUE(p.steps[0].copy);
  // End-to-end of frames 2..11: 7.2 .. 8.1 ms. numpy: p50 = 7.65, p90 = 7.2 + 0.9*8.1*... by rank:
  // values 7.2+0.1k (k=0..9); p90 -> rank 8.1 -> 7.2 + 0.81 = 8.01.
  const Summary& e2e = p.segments.back().ms;
  EXPECT_EQ(p.segments.back().name, "end-to-end (capture->output)");
  EXPECT_NEAR(e2e.min, 7.2, 1e-9);
  EXPECT_NEAR(e2e.max, 8.1, 1e-9);
  EXPECT_NEAR(e2e.p50, 7.65, 1e-9);
  EXPECT_NEAR(e2e.p90, 8.01, 1e-9);
  EXPECT_NEAR(e2e.mean, 7.65, 1e-9);
  // Copies of frames 2..11: uploads [3i, 3i+2), downloads [3i+5, 3i+6). Kernels [3i+2, 3i+5)
  // cover [8, 38) without gaps. Copy union: uploads 10 x 2 = 20 ms minus nothing + downloads
  // 10 x 1 ms, overlapping the uploads? [3i+5, 3i+6) vs upload of frame i+2 [3i+6, ...): no.
  // So 30 ms of copies; hidden = the parts under [8, 38): upload of frame 2 [6,8) is not,
  // frames 3..11 uploads (9 x 2) are; downloads of 2..10 [3i+5,3i+6) with 3i+6 <= 38 are (9),
  // frame 11's [38, 39) is not: hidden 18 + 9 = 27 of 30.
  EXPECT_NEAR(p.copy_ms, 30.0, 1e-9);
  EXPECT_NEAR(p.hidden_copy_fraction, 27.0 / 30.0, 1e-12);
  // Steady-state throughput: 9 intervals between the outputs of frames 2 and 11.
  const double span_s = (r.frames[11].output_ns - r.frames[2].output_ns) / 1e9;
  EXPECT_NEAR(p.fps, 9 / span_s, 1e-9);
  // CPU runs have no copies: no overlap figure.
  r.step_copy = {false, false, false};
  EXPECT_LT(summarize_profile(r).hidden_copy_fraction, 0);
}

TEST(Profile, WarmupCountsEvictedRecords) {
  RunReport r = hand_report(5, 3);
  r.records_evicted = 2;  // frames 0 and 1 were dropped: only one warm-up record left
  EXPECT_EQ(r.first_counted(), 1u);
  EXPECT_EQ(summarize_profile(r).counted, 4u);
  r.records_evicted = 10;
  EXPECT_EQ(r.first_counted(), 0u);
}

TEST(Profile, RunNoLongerThanItsWarmupIsCountedWhole) {
  RunReport r = hand_report(10, 10);
  r.frames_out = 10;
  EXPECT_TRUE(r.warmup_waived());
  EXPECT_EQ(r.first_counted(), 0u);
  const ProfileSummary p = summarize_profile(r);
  EXPECT_EQ(p.counted, 10u);
  EXPECT_GT(p.fps, 0);
  EXPECT_NE(profile_text(r, p).find("10 frames counted (warm-up of 10 frames not applied: the run had only 10"),
            std::string::npos);
  EXPECT_NE(r.text().find("not applied"), std::string::npos);
  EXPECT_FALSE(nlohmann::json::parse(r.json(false))["warmup_applied"].get<bool>());
  // One frame past the warm-up is enough to apply it.
  r = hand_report(11, 10);
  r.frames_out = 11;
  EXPECT_FALSE(r.warmup_waived());
  EXPECT_EQ(summarize_profile(r).counted, 1u);
  EXPECT_NE(r.text().find("first 10 frames skipped as warm-up"), std::string::npos);
  EXPECT_TRUE(nlohmann::json::parse(r.json(false))["warmup_applied"].get<bool>());
}

TEST(Profile, EngineKeepsTheNewestRecordsInOrder) {
  FrameSpec spec{PixelFormat::GRAY8, 32, 16, {25, 1}};
  TestSource src(spec, 23);
  CaptureSink sink(0, false);
  Chain chain = Chain::build(build_stages("median"), spec, {});
  sink.open(chain.output());
  EngineConfig cfg;
  cfg.max_records = 5;
  RunResult res = run_pipeline(src, chain, sink, cfg);
  ASSERT_FALSE(res.error);
  const RunReport& r = res.report;
  EXPECT_EQ(r.frames_out, 23);
  ASSERT_EQ(r.frames.size(), 5u);
  EXPECT_EQ(r.records_evicted, 18);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(r.frames[i].index, static_cast<int64_t>(18 + i));
  // Every hand-off in order, every step inside its frame's processing.
  for (const auto& f : r.frames) {
    EXPECT_LE(f.read_ns, f.capture_ns);
    EXPECT_LE(f.capture_ns, f.enqueue_ns);
    EXPECT_LE(f.enqueue_ns, f.submit_ns);
    EXPECT_LE(f.submit_ns, f.done_ns);
    EXPECT_LE(f.done_ns, f.write_ns);
    EXPECT_LE(f.write_ns, f.output_ns);
    ASSERT_EQ(f.step_start_ns.size(), 1u);
    EXPECT_GE(f.step_start_ns[0], f.submit_ns);
    EXPECT_LE(f.step_end_ns[0], f.done_ns);
  }
  EXPECT_EQ(r.step_tracks, std::vector<std::string>{"worker thread"});
}

TEST(Profile, ChromeTraceIsValidAndNested) {
  RunReport r = hand_report(8, 0);
  const json t = json::parse(chrome_trace_json(r));
  ASSERT_TRUE(t.contains("traceEvents"));
  std::map<std::string, int> tracks;
  int begins = 0, ends = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") tracks[e["args"]["name"]] = e["tid"];
    begins += e["ph"] == "b";
    ends += e["ph"] == "e";
  }
  for (const char* name : {"source thread", "worker thread", "CUDA upload stream", "CUDA compute stream",
                           "CUDA download stream", "sink thread"})
    EXPECT_TRUE(tracks.count(name)) << name;
  EXPECT_EQ(begins, 8);
  EXPECT_EQ(ends, 8);
  // Per frame: read, submit, H2D, k, frame span, D2H, write.
  EXPECT_EQ(check_nesting(t), 8u * 7);
  // Limit to 3 frames.
  EXPECT_EQ(check_nesting(json::parse(chrome_trace_json(r, 3))), 3u * 7);
  // A real CPU run: frame spans on the worker thread with the stages nested inside.
  FrameSpec spec{PixelFormat::YUV420P, 64, 48, {25, 1}};
  TestSource src(spec, 6);
  CaptureSink sink(0, false);
  Chain chain = Chain::build(build_stages("median,conv=box"), spec, {});
  sink.open(chain.output());
  RunResult res = run_pipeline(src, chain, sink, EngineConfig{});
  ASSERT_FALSE(res.error);
  EXPECT_EQ(check_nesting(json::parse(chrome_trace_json(res.report))), 6u * 5);
}

TEST(Profile, HtmlReportRendersInHeadlessChromium) {
  RunReport r = hand_report(200, 10);
  const std::string html = html_report(r, summarize_profile(r));
  size_t svgs = 0;
  for (size_t p = html.find("<svg"); p != std::string::npos; p = html.find("<svg", p + 4)) ++svgs;
  EXPECT_EQ(svgs, 2u + 4u + 1u);  // two line plots, 3 steps + end-to-end histograms, one timeline
  EXPECT_EQ(html.find("http://", html.find("<body")), html.find("http://www.w3.org"));  // no network
  const std::string path = tmp_path("profile.html"), png = tmp_path("profile.png");
  std::ofstream(path) << html;
  const char* chromium = nullptr;
  for (const char* c : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"})
    if (std::ifstream(c).good()) chromium = c;
  if (!chromium) {
    if (std::getenv("VFPIPE_REQUIRE_CHROMIUM")) FAIL() << "chromium is not installed";
    GTEST_SKIP() << "no chromium: the report was written but not rendered";
  }
  const CmdResult cr = run_cmd(std::string(chromium) +
                               " --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1200,1600 "
                               "--screenshot=" +
                               png + " file://" + path);
  ASSERT_EQ(cr.rc, 0) << cr.out;
  std::ifstream f(png, std::ios::binary | std::ios::ate);
  ASSERT_TRUE(f.good()) << cr.out;
  EXPECT_GT(static_cast<long>(f.tellg()), 20000);  // a blank page compresses to ~5 KB
#if VFPIPE_HAVE_OPENCV
  cv::Mat img = cv::imread(png, cv::IMREAD_COLOR);
  ASSERT_FALSE(img.empty());
  // Plots drawn: some pixels are the first series' blue, some the CDF's red.
  int blue = 0, red = 0;
  for (int y = 0; y < img.rows; ++y)
    for (int x = 0; x < img.cols; ++x) {
      const cv::Vec3b p = img.at<cv::Vec3b>(y, x);
      blue += p[0] > 150 && p[2] < 80 && p[1] > 80 && p[1] < 160;
      red += p[2] > 170 && p[1] < 80 && p[0] < 80;
    }
  EXPECT_GT(blue, 50);
  EXPECT_GT(red, 50);
#endif
}

TEST(Profile, CompareFlagsRegressions) {
  RunReport a = hand_report(20, 0), b = hand_report(20, 0);
  for (auto& f : b.frames) {
    f.step_ms[1] = 6.f;  // the kernel got twice as slow
    f.step_end_ns[1] += 3'000'000;
  }
  const json ja = profile_json(a, summarize_profile(a), false), jb = profile_json(b, summarize_profile(b), false);
  bool regressed = false;
  const std::string t = compare_profiles(ja, jb, 5, &regressed);
  EXPECT_TRUE(regressed);
  EXPECT_NE(t.find("+100.0%"), std::string::npos) << t;
  EXPECT_NE(t.find("<- slower"), std::string::npos) << t;
  compare_profiles(ja, ja, 5, &regressed);
  EXPECT_FALSE(regressed);
  // Through the CLI: exit status 1 on a regression, 0 otherwise; bad files are clear errors.
  const std::string pa = tmp_path("a.json"), pb = tmp_path("b.json");
  std::ofstream(pa) << ja.dump();
  std::ofstream(pb) << jb.dump();
  const std::string bin = VFPIPE_BIN;
  CmdResult r = run_cmd(bin + " profile --compare " + pa + " " + pb);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("slower"), std::string::npos);
  EXPECT_EQ(run_cmd(bin + " profile --compare " + pa + " " + pa).rc, 0);
  r = run_cmd(bin + " profile --compare " + pa + " /nonexistent.json");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("cannot open '/nonexistent.json'"), std::string::npos) << r.out;
}

TEST(Profile, CliWritesTableJsonTraceAndHtml) {
  const std::string bin = VFPIPE_BIN, prefix = tmp_path("prof");
  CmdResult r = run_cmd(bin +
                        " profile -i 'synthetic=size=160x90:frames=40' -f 'median,conv=gauss' --device cpu "
                        "--no-progress --prefix " +
                        prefix);
  ASSERT_EQ(r.rc, 0) << r.out;
  for (const char* k : {"p90", "input queue (capture->submit)", "end-to-end (capture->output)", "30 frames counted"})
    EXPECT_NE(r.out.find(k), std::string::npos) << k << "\n" << r.out;
  const json j = json::parse(std::ifstream(prefix + ".json"));
  EXPECT_EQ(j["profile"]["counted"], 30);
  EXPECT_EQ(j["frames"].size(), 40u);
  EXPECT_GT(check_nesting(json::parse(std::ifstream(prefix + ".trace.json"))), 0u);
  EXPECT_TRUE(std::ifstream(prefix + ".html").good());
  // --profile on run, with a bounded record count.
  r = run_cmd(bin +
              " run -i 'synthetic=size=64x64:frames=30' -f median --device cpu --no-progress "
              "--profile-frames 8 --profile " +
              prefix + "2");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(json::parse(std::ifstream(prefix + "2.json"))["frames"].size(), 8u);
  EXPECT_EQ(run_cmd(bin + " profile -f median").rc, 2);  // no input
}

#include "pipeline/g2g.hpp"

namespace {
// A synthetic recording: the display flips every `period` ms; the screen shows the new
// level `latency` ms after the flip call (display pipeline); a camera with frames every
// 1000/fps ms (random phase) integrates light over `exposure` ms ending at its timestamp,
// so a frame straddling a change sees a mix; plus sensor noise.
std::pair<std::vector<G2GFlip>, std::vector<G2GSample>> recording(double latency, double fps, double exposure,
                                                                  uint32_t seed, int flips = 40) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0, 3);
  const double period = 247.3, t_start = 100;  // not a multiple of the frame period: phases vary
  std::vector<G2GFlip> f;
  for (int i = 0; i < flips; ++i) f.push_back({static_cast<int64_t>((t_start + i * period) * 1e6), i % 2 == 0});
  auto level = [&](double t_ms) {  // what the screen shows at t (before the first flip: black)
    const double k = std::floor((t_ms - latency - t_start) / period);
    return (k < 0 || static_cast<int>(k) % 2 == 1) ? 20.0 : 230.0;
  };
  std::vector<G2GSample> s;
  const double phase = std::uniform_real_distribution<double>(0, 1000 / fps)(rng);
  for (double t = phase; t < t_start + flips * period + 500; t += 1000 / fps) {
    double acc = 0;
    for (int k = 0; k < 20; ++k) acc += level(t - exposure * (k + 0.5) / 20);
    s.push_back({static_cast<int64_t>(t * 1e6), acc / 20 + noise(rng)});
  }
  return {f, s};
}
}  // namespace

TEST(GlassToGlass, SyntheticRecordingsGiveTheLatency) {
  for (double latency : {35.0, 80.0, 160.0})
    for (double fps : {30.0, 60.0, 120.0}) {
      auto [flips, samples] = recording(latency, fps, 0.5 * 1000 / fps, static_cast<uint32_t>(latency + fps));
      const G2GResult r = analyze_glass_to_glass(flips, samples);
      EXPECT_EQ(r.missed, 0) << latency << " " << fps;
      ASSERT_EQ(r.delays_ms.size(), flips.size());
      const double frame = 1000 / fps;
      // The first frame past the midpoint has seen the new level for more than half its
      // exposure: it ends between latency + exposure/2 and one frame later. Over flips of
      // every phase the mean is the middle of that range.
      const double exposure = 0.5 * frame, lo = latency + exposure / 2;
      EXPECT_GE(r.ms.min, lo - 0.05 * frame) << latency << " " << fps;
      EXPECT_LE(r.ms.max, lo + frame + 0.05 * frame) << latency << " " << fps;
      EXPECT_NEAR(r.ms.mean, lo + frame / 2, frame / 4) << latency << " " << fps;
      EXPECT_NEAR(r.threshold, 125, 10);
    }
}

TEST(GlassToGlass, MissedFlipsAndNoSamples) {
  auto [flips, samples] = recording(60, 30, 10, 7, 10);
  // The camera stopped after the 5th flip: the others are missed, not mismeasured.
  const int64_t cut = flips[5].t_ns;
  std::vector<G2GSample> part;
  for (const auto& s : samples)
    if (s.t_ns < cut) part.push_back(s);
  G2GResult r = analyze_glass_to_glass(flips, part);
  EXPECT_EQ(r.delays_ms.size(), 5u);
  EXPECT_EQ(r.missed, 5);
  r = analyze_glass_to_glass(flips, {});
  EXPECT_EQ(r.missed, 10);
  // Patch luma of frames: gray and BGR.
  HostFrame g(FrameSpec{PixelFormat::GRAY8, 8, 8, {25, 1}}, false),
      c(FrameSpec{PixelFormat::BGR24, 8, 8, {25, 1}}, false);
  std::memset(g.data(), 0, g.layout().total_bytes);
  for (int y = 2; y < 6; ++y)
    for (int x = 2; x < 6; ++x) g.view().row(0, y)[x] = 200;
  EXPECT_DOUBLE_EQ(patch_luma(g.view(), 0.5), 200.0);
  EXPECT_DOUBLE_EQ(patch_luma(g.view(), 1.0), 200.0 * 16 / 64);
  std::memset(c.data(), 0, c.layout().total_bytes);
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 8; ++x) c.view().row(0, y)[3 * x + 2] = 100;  // red
  EXPECT_NEAR(patch_luma(c.view(), 0.5), 29.9, 1e-9);
}
