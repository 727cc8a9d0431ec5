#include <gtest/gtest.h>

#include <cmath>

#include "core/error.hpp"
#include "io/synthetic.hpp"
#include "test_util.hpp"

using namespace vfp;

TEST(Synthetic, ParsesOptions) {
  SyntheticParams p =
      parse_synthetic("synthetic=size=1921x1081:rate=30000/1001:frames=5:format=gray:noise=gauss:sigma=7:seed=3");
  EXPECT_EQ(p.spec.width, 1921);
  EXPECT_EQ(p.spec.height, 1081);
  EXPECT_EQ(p.spec.fps.num, 30000);
  EXPECT_EQ(p.spec.fps.den, 1001);
  EXPECT_EQ(p.spec.format, PixelFormat::GRAY8);
  EXPECT_EQ(p.frames, 5);
  EXPECT_EQ(p.noise, "gauss");
  EXPECT_DOUBLE_EQ(p.sigma, 7);
  EXPECT_EQ(parse_synthetic("synthetic=s=4k").spec.width, 3840);
  EXPECT_EQ(parse_synthetic("synthetic").spec.width, 640);
  EXPECT_EQ(parse_synthetic("synthetic=rate=29.97").spec.fps.den, 1001);
}

TEST(Synthetic, BadOptionsPointAtTheValue) {
  auto pos = [](const std::string& t) -> size_t {
    try {
      parse_synthetic(t);
    } catch (const ParseError& e) {
      return e.pos();
    }
    return std::string::npos;
  };
  EXPECT_EQ(pos("synthetic=size=12y4"), 15u);
  EXPECT_EQ(pos("synthetic=format=nv12"), 17u);
  EXPECT_EQ(pos("synthetic=noise=pink"), 16u);
  EXPECT_EQ(pos("synthetic=rate=-3"), 15u);
  EXPECT_THROW(parse_synthetic("synthetic=size=0x4"), Error);  // zero-sized frames
}

TEST(Synthetic, DeterministicAndMoving) {
  SyntheticParams p = parse_synthetic("synthetic=size=64x36:noise=gauss:seed=9");
  SyntheticSource a(p), b(p);
  HostFrame fa(p.spec, false), fb(p.spec, false), f2(p.spec, false);
  a.render(3, fa);
  b.render(3, fb);
  EXPECT_TRUE(fa.same_pixels(fb));
  a.render(4, f2);
  EXPECT_FALSE(fa.same_pixels(f2));
  p.seed = 10;
  SyntheticSource c(p);
  c.render(3, fb);
  EXPECT_FALSE(fa.same_pixels(fb));
}

TEST(Synthetic, NoiseHasTheRequestedStrength) {
  SyntheticParams clean = parse_synthetic("synthetic=size=320x240:format=gray");
  SyntheticParams noisy = parse_synthetic("synthetic=size=320x240:format=gray:noise=gauss:sigma=10");
  SyntheticParams sp = parse_synthetic("synthetic=size=320x240:format=gray:noise=saltpepper:density=0.1");
  SyntheticSource a(clean), b(noisy), c(sp);
  HostFrame fa(clean.spec, false), fb(clean.spec, false), fc(clean.spec, false);
  a.render(0, fa);
  b.render(0, fb);
  c.render(0, fc);
  double sum = 0, sum2 = 0;
  int n = 0, changed = 0, extreme = 0;
  for (int y = 0; y < 240; ++y)
    for (int x = 0; x < 320; ++x) {
      int v0 = fa.view().row(0, y)[x], v1 = fb.view().row(0, y)[x], v2 = fc.view().row(0, y)[x];
      if (v0 > 40 && v0 < 215) {  // away from clipping
        double d = v1 - v0;
        sum += d;
        sum2 += d * d;
        ++n;
      }
      if (v2 != v0) ++changed;
      if (v2 != v0 && (v2 == 0 || v2 == 255)) ++extreme;
    }
  double mean = sum / n, sd = std::sqrt(sum2 / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.2);
  EXPECT_NEAR(sd, 10.0, 0.5);
  double density = static_cast<double>(changed) / (320 * 240);
  EXPECT_NEAR(density, 0.1, 0.01);
  EXPECT_EQ(changed, extreme);
}

TEST(Synthetic, FrameCountAndCache) {
  SyntheticParams p = parse_synthetic("synthetic=size=16x16:frames=3:cache=2");
  SyntheticSource s(p);
  EXPECT_TRUE(s.provides_frames());
  auto f0 = s.next_frame(), f1 = s.next_frame(), f2 = s.next_frame();
  EXPECT_TRUE(f0 && f1 && f2);
  EXPECT_EQ(f0.get(), f2.get());  // cycles the cached frames
  EXPECT_FALSE(s.next_frame());
  EXPECT_EQ(s.frame_count(), 3);
}
