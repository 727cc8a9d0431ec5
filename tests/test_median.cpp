// Median stage, CPU side: the sliding-histogram implementation against the literal
// definition (sort every window), options and errors, and FFmpeg's vf_median output.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "core/error.hpp"
#include "core/filter_parser.hpp"
#include "cpu/median.hpp"
#include "io/y4m.hpp"
#include "pipeline/engine.hpp"
#include "test_util.hpp"

using namespace vfp;
using namespace vfp::test;

namespace {
std::vector<uint8_t> random_plane(int w, int h, uint32_t seed, bool structured = false) {
  std::vector<uint8_t> v(static_cast<size_t>(w) * h);
  std::mt19937 rng(seed);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      v[static_cast<size_t>(y) * w + x] =
          structured ? static_cast<uint8_t>(((x / 3 + y / 2) % 2) ? 250 - (x * 7 % 11) : (y * 5 % 13))
                     : static_cast<uint8_t>(rng());
  return v;
}
}  // namespace

TEST(Median, RankDefinition) {
  MedianParams p;
  p.radius = 1;
  EXPECT_EQ(p.count(), 9);
  EXPECT_EQ(p.rank(), 4);
  p.percentile = 0;
  EXPECT_EQ(p.rank(), 0);
  p.percentile = 1;
  EXPECT_EQ(p.rank(), 8);
  p.percentile = 0.3;  // 0.3 * 8 + 0.5 = 2.9 -> 2
  EXPECT_EQ(p.rank(), 2);
  p.percentile = 0.32;  // 3.06 -> 3
  EXPECT_EQ(p.rank(), 3);
  p.radius = 2;
  p.radiusV = 1;
  p.percentile = 0.5;
  EXPECT_EQ(p.count(), 15);
  EXPECT_EQ(p.rank(), 7);
}

TEST(Median, SlidingHistogramEqualsDefinition) {
  const std::pair<int, int> sizes[] = {{1, 1}, {3, 7}, {7, 3}, {37, 23}, {2, 40}};
  const std::pair<int, int> radii[] = {{1, 1}, {2, 2}, {3, 1}, {1, 4}, {6, 6}, {20, 3}, {60, 60}};
  for (auto [w, h] : sizes)
    for (auto [rx, ry] : radii)
      for (Border b : {Border::Replicate, Border::Reflect101, Border::Reflect, Border::Constant})
        for (double pc : {0.5, 0.0, 0.25, 0.9, 1.0})
          for (bool structured : {false, true}) {
            MedianParams p;
            p.radius = rx;
            p.radiusV = ry;
            p.border = b;
            p.percentile = pc;
            p.value = 77;
            auto src = random_plane(w, h, static_cast<uint32_t>(w * 100 + rx), structured);
            std::vector<uint8_t> a(src.size()), c(src.size());
            median_plane_naive(src.data(), w, a.data(), w, w, h, p);
            median_plane_cpu(src.data(), w, c.data(), w, w, h, p);
            ASSERT_EQ(a, c) << w << "x" << h << " r=" << rx << "," << ry << " " << border_name(b) << " p=" << pc;
          }
}

namespace {
// 16-bit planes of four kinds: random over the whole range; 10-bit video's samples (an
// 8-bit picture times 257 plus small noise); extremes; and ties in the upper byte that
// differ in the lower one, which the search's lower levels must separate.
std::vector<uint16_t> random_plane16(int w, int h, uint32_t seed, int kind) {
  std::vector<uint16_t> v(static_cast<size_t>(w) * h);
  std::mt19937 rng(seed);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint32_t r = rng();
    v[i] = static_cast<uint16_t>(kind == 0   ? r
                                 : kind == 1 ? (r & 255) * 257 + (r >> 8) % 64
                                 : kind == 2 ? ((r & 1) ? 65535 : 0)
                                             : 0x6400 + (r % 48) * 5);
  }
  return v;
}
}  // namespace

TEST(Median, SixteenBitSlidingHistogramEqualsDefinition) {
  const std::pair<int, int> sizes[] = {{1, 1}, {3, 7}, {37, 23}};
  const std::pair<int, int> radii[] = {{1, 1}, {2, 2}, {1, 4}, {6, 6}, {20, 3}};
  for (auto [w, h] : sizes)
    for (auto [rx, ry] : radii)
      for (Border b : {Border::Replicate, Border::Reflect101, Border::Reflect, Border::Constant})
        for (double pc : {0.5, 0.0, 0.25, 1.0})
          for (int kind = 0; kind < 4; ++kind) {
            MedianParams p;
            p.radius = rx;
            p.radiusV = ry;
            p.border = b;
            p.percentile = pc;
            p.value = 0x6419;
            auto src = random_plane16(w, h, static_cast<uint32_t>(w * 100 + rx + kind), kind);
            std::vector<uint16_t> a(src.size()), c(src.size());
            median_plane_naive(src.data(), 2 * w, a.data(), 2 * w, w, h, p);
            median_plane_cpu(src.data(), 2 * w, c.data(), 2 * w, w, h, p);
            ASSERT_EQ(a, c) << w << "x" << h << " r=" << rx << "," << ry << " " << border_name(b) << " p=" << pc
                            << " kind " << kind;
          }
}

// The median commutes with x -> 257 x: a 16-bit frame holding an 8-bit one filters to the
// 8-bit result times 257, the constant border's value included (given on the 8-bit scale).
TEST(Median, StageOnSixteenBitFramesEqualsEightBitTimes257) {
  for (auto [f8, f16] :
       {std::pair{PixelFormat::GRAY8, PixelFormat::GRAY16}, std::pair{PixelFormat::YUV420P, PixelFormat::YUV420P16}}) {
    const FrameSpec s8{f8, 41, 29, {25, 1}}, s16{f16, 41, 29, {25, 1}};
    TestSource src(s8, 1);
    HostFrame in8(s8, false), in16(s16, false), out8(s8, false), out16(s16, false);
    ASSERT_TRUE(src.read(in8));
    const ImageView a = in8.view(), b = in16.view();
    for (int pl = 0; pl < plane_count(f8); ++pl)
      for (int y = 0; y < a.ph[pl]; ++y)
        for (int x = 0; x < a.pw[pl]; ++x)
          reinterpret_cast<uint16_t*>(b.row(pl, y))[x] = static_cast<uint16_t>(a.row(pl, y)[x] * 257);
    for (const char* f : {"median=radius=2:border=constant:value=200", "median=radius=3:radiusV=1:percentile=0.3"}) {
      Chain c8 = Chain::build(build_stages(f), s8, {}), c16 = Chain::build(build_stages(f), s16, {});
      ASSERT_EQ(c16.size(), 1u) << "no conversion: the stage takes 16-bit frames";
      c8.step(0).stage->run_cpu(in8.view(), out8.view(), StageContext{});
      c16.step(0).stage->run_cpu(in16.view(), out16.view(), StageContext{});
      const ImageView o8 = out8.view(), o16 = out16.view();
      for (int pl = 0; pl < plane_count(f8); ++pl)
        for (int y = 0; y < o8.ph[pl]; ++y)
          for (int x = 0; x < o8.pw[pl]; ++x)
            ASSERT_EQ(reinterpret_cast<const uint16_t*>(o16.row(pl, y))[x], o8.row(pl, y)[x] * 257)
                << f << " plane " << pl << " (" << x << "," << y << ")";
    }
  }
}

TEST(Median, KnownValues) {
  // 3x3 with a salt pixel: the median removes it; min and max filters bound it.
  std::vector<uint8_t> src = {10, 10, 10, 10, 255, 10, 10, 10, 10};
  std::vector<uint8_t> out(9);
  MedianParams p;
  median_plane_cpu(src.data(), 3, out.data(), 3, 3, 3, p);
  for (uint8_t v : out) EXPECT_EQ(v, 10);
  p.percentile = 1;
  median_plane_cpu(src.data(), 3, out.data(), 3, 3, 3, p);
  for (uint8_t v : out) EXPECT_EQ(v, 255);  // every window contains the centre
  // Constant border with value 0 and the minimum: corners see zeros.
  p.percentile = 0;
  p.border = Border::Constant;
  p.value = 0;
  median_plane_cpu(src.data(), 3, out.data(), 3, 3, 3, p);
  EXPECT_EQ(out[0], 0);
  EXPECT_EQ(out[4], 10);
}

TEST(Median, OptionErrorsNameTheOption) {
  auto msg = [](const std::string& f) {
    try {
      auto st = build_stages(f);
      Chain::build(std::move(st), {PixelFormat::GRAY8, 16, 16, {25, 1}}, {});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(msg("median=radius=0").find("option 'radius'"), std::string::npos);
  EXPECT_NE(msg("median=radius=128").find("out of range 1..127"), std::string::npos);
  EXPECT_NE(msg("median=percentile=1.5").find("option 'percentile'"), std::string::npos);
  EXPECT_NE(msg("median=border=mirror").find("option 'border'"), std::string::npos);
  EXPECT_NE(msg("median=planes=16").find("option 'planes'"), std::string::npos);
  EXPECT_NE(msg("median=planes=0").find("planes=0"), std::string::npos);
  EXPECT_NE(msg("median=planes=2").find("selects none of the 1 plane of gray"), std::string::npos);
  EXPECT_EQ(msg("median=radius=100"), "");  // a window larger than the frame is fine
}

TEST(Median, StageFiltersSelectedPlanesAndCopiesOthers) {
  FrameSpec spec{PixelFormat::YUV420P, 41, 29, {25, 1}};
  TestSource src(spec, 2);
  CaptureSink sink;
  Chain chain = Chain::build(build_stages("median=radius=2:planes=5"), spec, {});  // Y and V
  sink.open(chain.output());
  RunResult r = run_pipeline(src, chain, sink, EngineConfig{});
  ASSERT_FALSE(r.error);
  TestSource again(spec, 2);
  HostFrame in(spec, false);
  ASSERT_TRUE(again.read(in));
  ImageView iv = in.view(), ov = sink.frames[0]->view();
  MedianParams p;
  p.radius = 2;
  for (int pl = 0; pl < 3; ++pl) {
    std::vector<uint8_t> want(static_cast<size_t>(iv.pw[pl]) * iv.ph[pl]);
    if (pl == 1) {
      for (int y = 0; y < iv.ph[pl]; ++y)
        std::copy(iv.row(pl, y), iv.row(pl, y) + iv.pw[pl], want.begin() + y * iv.pw[pl]);
    } else {
      median_plane_naive(iv.data[pl], iv.pitch[pl], want.data(), iv.pw[pl], iv.pw[pl], iv.ph[pl], p);
    }
    for (int y = 0; y < iv.ph[pl]; ++y)
      ASSERT_EQ(0, std::memcmp(ov.row(pl, y), want.data() + y * iv.pw[pl], static_cast<size_t>(iv.pw[pl])))
          << "plane " << pl << " row " << y;
  }
}

TEST(Median, BitExactWithFfmpeg) {
  if (run_cmd("ffmpeg -version").rc != 0) GTEST_SKIP() << "ffmpeg not installed";
  const std::string in = tmp_path("median_in.y4m"), ff = tmp_path("median_ff.y4m");
  for (const char* fmt : {"gray", "yuv420p", "gray16le", "yuv420p16le"}) {
    // A noisy odd-sized clip made by ffmpeg itself.
    CmdResult g = run_cmd(std::string("ffmpeg -v error -y -f lavfi -i testsrc2=size=161x91:rate=25 "
                                      "-vf noise=alls=40:allf=t -frames:v 3 -strict -1 -pix_fmt ") +
                          fmt + " " + in);
    ASSERT_EQ(g.rc, 0) << g.out;
    for (const char* args :
         {"radius=1", "radius=2", "radius=3:radiusV=1", "radius=1:radiusV=4", "radius=7", "radius=20:radiusV=10"}) {
      CmdResult f =
          run_cmd("ffmpeg -v error -y -i " + in + " -vf median=" + args + " -strict -1 -f yuv4mpegpipe " + ff);
      ASSERT_EQ(f.rc, 0) << f.out;
      Y4mSource a(in), b(ff);
      MedianParams p;
      auto stages = build_stages(std::string("median=") + args);
      Chain chain = Chain::build(std::move(stages), a.spec(), {});
      HostFrame fin(a.spec(), false), fout(a.spec(), false), fref(b.spec(), false);
      int frames = 0;
      while (a.read(fin)) {
        ASSERT_TRUE(b.read(fref));
        chain.step(0).stage->run_cpu(fin.view(), fout.view(), StageContext{});
        ASSERT_TRUE(fout.same_pixels(fref)) << fmt << " median=" << args << " frame " << frames;
        ++frames;
      }
      EXPECT_EQ(frames, 3);
    }
  }
  std::remove(in.c_str());
  std::remove(ff.c_str());
}
