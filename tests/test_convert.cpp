#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cpu/convert.hpp"
#include "cpu/convert_ops.hpp"
#include "test_util.hpp"

using namespace vfp;

namespace {
const PixelFormat kAll[] = {PixelFormat::GRAY8, PixelFormat::YUV420P, PixelFormat::YUV444P,   PixelFormat::BGR24,
                            PixelFormat::RGB24, PixelFormat::GRAY16,  PixelFormat::YUV420P16, PixelFormat::YUV444P16};

std::unique_ptr<HostFrame> solid_bgr(int w, int h, uint8_t b, uint8_t g, uint8_t r) {
  auto f = std::make_unique<HostFrame>(FrameSpec{PixelFormat::BGR24, w, h, {25, 1}}, false);
  ImageView v = f->view();
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      v.row(0, y)[3 * x] = b;
      v.row(0, y)[3 * x + 1] = g;
      v.row(0, y)[3 * x + 2] = r;
    }
  return f;
}
}  // namespace

TEST(Convert, KnownBt601Values) {
  const conv::YuvMatrix m = conv::yuv_matrix({ColorMatrix::BT601, ColorRange::Limited}, 16, 16);
  EXPECT_EQ(conv::rgb_to_y(m, 0, 0, 0), 16);
  EXPECT_EQ(conv::rgb_to_y(m, 255, 255, 255), 235);
  EXPECT_EQ(conv::chroma_from_num(conv::rgb_to_u_num(m, 255, 255, 255), 1), 128);
  EXPECT_EQ(conv::chroma_from_num(conv::rgb_to_v_num(m, 0, 0, 0), 1), 128);
  // Pure red: Y=82, U=90, V=240 (the classic BT.601 studio-range values).
  EXPECT_EQ(conv::rgb_to_y(m, 255, 0, 0), 82);
  EXPECT_EQ(conv::chroma_from_num(conv::rgb_to_u_num(m, 255, 0, 0), 1), 90);
  EXPECT_EQ(conv::chroma_from_num(conv::rgb_to_v_num(m, 255, 0, 0), 1), 240);
  int r, g, b;
  conv::yuv_to_rgb(m, 235, 128, 128, r, g, b);
  EXPECT_EQ(r, 255);
  EXPECT_EQ(g, 255);
  EXPECT_EQ(b, 255);
  conv::yuv_to_rgb(m, 16, 128, 128, r, g, b);
  EXPECT_EQ(r + g + b, 0);
  EXPECT_EQ(conv::floor_div(-1, 256), -1);
  EXPECT_EQ(conv::floor_div(255, 256), 0);
  EXPECT_EQ(conv::rgb_to_gray(m, 255, 0, 0), 77);  // full-range luma
}

// Every matrix and range against its real-valued definition (Kr, Kb; scales 219/255 and
// 224/255 in limited range): Y, U and V of the primaries and secondaries within one level,
// black, white and grays exact, and YUV -> RGB -> YUV close to identity.
TEST(Convert, EveryMatrixAndRangeFollowsItsDefinition) {
  const struct {
    ColorMatrix m;
    double kr, kb;
  } defs[] = {
      {ColorMatrix::BT601, 0.299, 0.114}, {ColorMatrix::BT709, 0.2126, 0.0722}, {ColorMatrix::BT2020, 0.2627, 0.0593}};
  for (const auto& d : defs)
    for (ColorRange range : {ColorRange::Limited, ColorRange::Full}) {
      const conv::YuvMatrix m = conv::yuv_matrix({d.m, range}, 16, 16);
      const bool full = range == ColorRange::Full;
      const double ys = full ? 1 : 219.0 / 255, cs = full ? 1 : 224.0 / 255, yoff = full ? 0 : 16;
      const std::string what = std::string(color_matrix_name(d.m)) + " " + color_range_name(range);
      for (int c = 0; c < 8; ++c) {
        const int R = (c & 1) * 255, G = (c >> 1 & 1) * 255, B = (c >> 2 & 1) * 255;
        const double y = d.kr * R + (1 - d.kr - d.kb) * G + d.kb * B;
        EXPECT_NEAR(conv::rgb_to_y(m, R, G, B), yoff + y * ys, 1.000001) << what << " colour " << c;
        const int u = conv::chroma_from_num(conv::rgb_to_u_num(m, R, G, B), 1);
        const int v = conv::chroma_from_num(conv::rgb_to_v_num(m, R, G, B), 1);
        EXPECT_NEAR(u, std::min(255.0, 128 + (B - y) / (2 * (1 - d.kb)) * cs), 1.000001) << what << " colour " << c;
        EXPECT_NEAR(v, std::min(255.0, 128 + (R - y) / (2 * (1 - d.kr)) * cs), 1.000001) << what << " colour " << c;
      }
      for (int g : {0, 1, 77, 128, 254, 255}) {
        EXPECT_EQ(conv::rgb_to_y(m, g, g, g), static_cast<int>(yoff + ((full ? 256 : 220) * g + 128) / 256)) << what;
        EXPECT_EQ(conv::chroma_from_num(conv::rgb_to_u_num(m, g, g, g), 1), 128) << what;
        EXPECT_EQ(conv::chroma_from_num(conv::rgb_to_v_num(m, g, g, g), 1), 128) << what;
        EXPECT_EQ(conv::rgb_to_gray(m, g, g, g), g) << what;
      }
      int r, g, b;
      conv::yuv_to_rgb(m, full ? 255 : 235, 128, 128, r, g, b);
      EXPECT_EQ(r + g + b, 3 * 255) << what;
      conv::yuv_to_rgb(m, full ? 0 : 16, 128, 128, r, g, b);
      EXPECT_EQ(r + g + b, 0) << what;
      int worst = 0;  // YUV -> RGB -> YUV over in-gamut samples
      for (int Y = 40; Y <= 200; Y += 8)
        for (int U = 100; U <= 156; U += 8)
          for (int V = 100; V <= 156; V += 8) {
            conv::yuv_to_rgb(m, Y, U, V, r, g, b);
            if (r == 0 || g == 0 || b == 0 || r == 255 || g == 255 || b == 255) continue;
            worst = std::max({worst, std::abs(conv::rgb_to_y(m, r, g, b) - Y),
                              std::abs(conv::chroma_from_num(conv::rgb_to_u_num(m, r, g, b), 1) - U),
                              std::abs(conv::chroma_from_num(conv::rgb_to_v_num(m, r, g, b), 1) - V)});
          }
      EXPECT_LE(worst, 2) << what;
    }
}

// Untagged frames: BT.709 for HD, BT.601 below, limited range (as players do); the
// converter uses the frame's tags when there are some.
TEST(Convert, UntaggedHdIsBt709AndTagsAreFollowed) {
  EXPECT_EQ(ColorDesc{}.resolved(1280, 720).matrix, ColorMatrix::BT709);
  EXPECT_EQ(ColorDesc{}.resolved(1024, 576).matrix, ColorMatrix::BT601);
  EXPECT_EQ(ColorDesc{}.resolved(720, 480).range, ColorRange::Limited);
  EXPECT_EQ((ColorDesc{ColorMatrix::BT2020, ColorRange::Full}.resolved(64, 64).matrix), ColorMatrix::BT2020);
  const auto red_y = [](int w, int h, ColorDesc c) {
    auto src = solid_bgr(w, h, 0, 0, 255);
    HostFrame dst({PixelFormat::YUV444P, w, h, {25, 1}}, false);
    convert_cpu(src->view(), dst.view(), c);
    return static_cast<int>(dst.view().row(0, 0)[0]);
  };
  EXPECT_EQ(red_y(64, 48, {}), 82);   // BT.601
  EXPECT_EQ(red_y(1280, 8, {}), 63);  // BT.709: 16 + 0.2126 * 219
  EXPECT_EQ(red_y(64, 48, {ColorMatrix::BT709, ColorRange::Unspecified}), 63);
  EXPECT_EQ(red_y(64, 48, {ColorMatrix::BT709, ColorRange::Full}), 54);
  EXPECT_EQ(red_y(64, 48, {ColorMatrix::BT2020, ColorRange::Limited}), 74);
}

TEST(Convert, SolidColourToYuv420OnOddSize) {
  auto src = solid_bgr(3, 7, 0, 0, 255);
  HostFrame dst({PixelFormat::YUV420P, 3, 7, {25, 1}}, false);
  convert_cpu(src->view(), dst.view());
  ImageView v = dst.view();
  for (int y = 0; y < 7; ++y)
    for (int x = 0; x < 3; ++x) EXPECT_EQ(v.row(0, y)[x], 82);
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 2; ++x) {
      EXPECT_EQ(v.row(1, y)[x], 90);
      EXPECT_EQ(v.row(2, y)[x], 240);
    }
}

TEST(Convert, ChromaDownsampleAveragesExistingSamples) {
  // 3x3 yuv444p with distinct chroma; the 4:2:0 edge samples average only what exists.
  HostFrame s({PixelFormat::YUV444P, 3, 3, {25, 1}}, false);
  ImageView v = s.view();
  int u[3][3] = {{10, 20, 30}, {40, 50, 60}, {70, 80, 91}};
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 3; ++x) {
      v.row(0, y)[x] = static_cast<uint8_t>(100 + x);
      v.row(1, y)[x] = static_cast<uint8_t>(u[y][x]);
      v.row(2, y)[x] = 128;
    }
  HostFrame d({PixelFormat::YUV420P, 3, 3, {25, 1}}, false);
  convert_cpu(s.view(), d.view());
  ImageView o = d.view();
  EXPECT_EQ(o.row(1, 0)[0], (10 + 20 + 40 + 50 + 2) / 4);
  EXPECT_EQ(o.row(1, 0)[1], (30 + 60 + 1) / 2);
  EXPECT_EQ(o.row(1, 1)[0], (70 + 80 + 1) / 2);
  EXPECT_EQ(o.row(1, 1)[1], 91);
  EXPECT_EQ(o.row(0, 2)[2], 102);
}

TEST(Convert, LosslessRoundTrips) {
  for (auto [w, h] : {std::pair{1, 1}, {3, 7}, {2, 2}, {17, 9}, {64, 33}}) {
    // yuv420p -> yuv444p -> yuv420p, gray -> yuv* -> gray, bgr <-> rgb are exact.
    FrameSpec s420{PixelFormat::YUV420P, w, h, {25, 1}};
    HostFrame a(s420, false), b({PixelFormat::YUV444P, w, h, {25, 1}}, false), c(s420, false);
    test::fill_random(a, 11);
    convert_cpu(a.view(), b.view());
    convert_cpu(b.view(), c.view());
    EXPECT_TRUE(a.same_pixels(c)) << w << "x" << h;

    FrameSpec sg{PixelFormat::GRAY8, w, h, {25, 1}};
    HostFrame g(sg, false), g2(sg, false);
    test::fill_random(g, 5);
    for (PixelFormat mid : {PixelFormat::YUV420P, PixelFormat::YUV444P, PixelFormat::BGR24}) {
      HostFrame m({mid, w, h, {25, 1}}, false);
      convert_cpu(g.view(), m.view());
      convert_cpu(m.view(), g2.view());
      if (mid == PixelFormat::BGR24) {
        // gray -> RGB replicates, RGB -> gray uses 77+150+29 = 256: exact.
        EXPECT_TRUE(g.same_pixels(g2)) << "via bgr " << w << "x" << h;
      } else {
        EXPECT_TRUE(g.same_pixels(g2)) << "via " << pix_fmt_name(mid);
      }
    }

    HostFrame bgr({PixelFormat::BGR24, w, h, {25, 1}}, false), rgb({PixelFormat::RGB24, w, h, {25, 1}}, false),
        bgr2({PixelFormat::BGR24, w, h, {25, 1}}, false);
    test::fill_random(bgr, 9);
    convert_cpu(bgr.view(), rgb.view());
    EXPECT_EQ(rgb.view().row(0, 0)[0], bgr.view().row(0, 0)[2]);
    convert_cpu(rgb.view(), bgr2.view());
    EXPECT_TRUE(bgr.same_pixels(bgr2));
  }
}

TEST(Convert, RgbYuvRgbErrorIsSmall) {
  // Limited-range YUV loses a little precision; the round trip stays within 3 levels
  // for in-gamut colours (pure 4:4:4, no chroma subsampling).
  HostFrame a({PixelFormat::RGB24, 64, 64, {25, 1}}, false), m({PixelFormat::YUV444P, 64, 64, {25, 1}}, false),
      b({PixelFormat::RGB24, 64, 64, {25, 1}}, false);
  test::fill_random(a, 21);
  convert_cpu(a.view(), m.view());
  convert_cpu(m.view(), b.view());
  int worst = 0;
  for (int y = 0; y < 64; ++y)
    for (int x = 0; x < 64 * 3; ++x) worst = std::max(worst, std::abs(a.view().row(0, y)[x] - b.view().row(0, y)[x]));
  EXPECT_LE(worst, 3);
}

TEST(Convert, EveryPairRunsOnEveryOddSize) {
  for (PixelFormat sf : kAll)
    for (PixelFormat df : kAll)
      for (auto [w, h] : {std::pair{1, 1}, {3, 7}, {8, 1}, {1, 5}}) {
        HostFrame s({sf, w, h, {25, 1}}, false), d({df, w, h, {25, 1}}, false);
        test::fill_random(s, 1);
        EXPECT_NO_THROW(convert_cpu(s.view(), d.view()));
        if (sf == df) EXPECT_TRUE(s.same_pixels(d)) << pix_fmt_name(sf);
      }
}

TEST(Convert, SixteenBitScale) {
  // 8 -> 16 is v * 257 (0 -> 0, 255 -> 65535); 16 -> 8 rounds v / 257 half up, so 8 -> 16 -> 8
  // is exact and every 16-bit value lands on its nearest 8-bit level.
  HostFrame g8({PixelFormat::GRAY8, 256, 1, {25, 1}}, false), g16({PixelFormat::GRAY16, 256, 1, {25, 1}}, false),
      back({PixelFormat::GRAY8, 256, 1, {25, 1}}, false);
  for (int x = 0; x < 256; ++x) g8.view().row(0, 0)[x] = static_cast<uint8_t>(x);
  convert_cpu(g8.view(), g16.view());
  for (int x = 0; x < 256; ++x) ASSERT_EQ(g16.view().row16(0, 0)[x], x * 257);
  convert_cpu(g16.view(), back.view());
  EXPECT_TRUE(g8.same_pixels(back));
  HostFrame all16({PixelFormat::GRAY16, 65536, 1, {25, 1}}, false),
      all8({PixelFormat::GRAY8, 65536, 1, {25, 1}}, false);
  for (int v = 0; v < 65536; ++v) all16.view().row16(0, 0)[v] = static_cast<uint16_t>(v);
  convert_cpu(all16.view(), all8.view());
  for (int v = 0; v < 65536; ++v) {
    const int got = all8.view().row(0, 0)[v];
    ASSERT_LE(std::abs(got * 257 - v), 128) << v;  // nearest level (ties: 128.5 cannot occur)
  }
}

TEST(Convert, SixteenBitLayoutsStayAtSixteenBits) {
  for (auto [w, h] : {std::pair{1, 1}, {3, 7}, {17, 9}}) {
    // yuv420p16 -> yuv444p16 -> yuv420p16 is exact, with samples that are not multiples of 257.
    HostFrame a({PixelFormat::YUV420P16, w, h, {25, 1}}, false), b({PixelFormat::YUV444P16, w, h, {25, 1}}, false),
        c({PixelFormat::YUV420P16, w, h, {25, 1}}, false);
    test::fill_random(a, 3);
    convert_cpu(a.view(), b.view());
    convert_cpu(b.view(), c.view());
    EXPECT_TRUE(a.same_pixels(c)) << w << "x" << h;
    // gray16 -> yuv444p16: Y kept bit for bit, chroma neutral at 128 * 257.
    HostFrame g({PixelFormat::GRAY16, w, h, {25, 1}}, false);
    test::fill_random(g, 4);
    convert_cpu(g.view(), b.view());
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        ASSERT_EQ(b.view().row16(0, y)[x], g.view().row16(0, y)[x]);
        ASSERT_EQ(b.view().row16(1, y)[x], 32896);
        ASSERT_EQ(b.view().row16(2, y)[x], 32896);
      }
  }
  // 4:4:4 -> 4:2:0 at 16 bits averages 16-bit samples: (1000 + 1001 + 1002 + 1003 + 2) / 4.
  HostFrame q({PixelFormat::YUV444P16, 2, 2, {25, 1}}, false), r({PixelFormat::YUV420P16, 2, 2, {25, 1}}, false);
  for (int p = 0; p < 3; ++p)
    for (int i = 0; i < 4; ++i) q.view().row16(p, i / 2)[i % 2] = static_cast<uint16_t>(1000 + i);
  convert_cpu(q.view(), r.view());
  EXPECT_EQ(r.view().row16(1, 0)[0], 1002);
  EXPECT_EQ(r.view().row16(2, 0)[0], 1002);
}

TEST(Convert, SixteenBitToRgbGoesThroughEightBits) {
  // RGB is 8-bit: yuv420p16 -> bgr24 equals yuv420p16 -> yuv420p -> bgr24.
  const int w = 19, h = 11;
  HostFrame a({PixelFormat::YUV420P16, w, h, {25, 1}}, false), m({PixelFormat::YUV420P, w, h, {25, 1}}, false),
      direct({PixelFormat::BGR24, w, h, {25, 1}}, false), two({PixelFormat::BGR24, w, h, {25, 1}}, false);
  test::fill_random(a, 8);
  convert_cpu(a.view(), direct.view());
  convert_cpu(a.view(), m.view());
  convert_cpu(m.view(), two.view());
  EXPECT_TRUE(direct.same_pixels(two));
  // And back: bgr24 -> gray16 is the 8-bit luma times 257.
  HostFrame g16({PixelFormat::GRAY16, w, h, {25, 1}}, false), g8({PixelFormat::GRAY8, w, h, {25, 1}}, false);
  convert_cpu(direct.view(), g16.view());
  convert_cpu(direct.view(), g8.view());
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) ASSERT_EQ(g16.view().row16(0, y)[x], g8.view().row(0, y)[x] * 257);
}

// GPU decoders' semi-planar pictures: NV12 splits as it is; P010's 10 significant high bits
// widen to the 16-bit scale by rounding v * 65535 / 1023 (the low bits are ignored).
TEST(Convert, SemiPlanarSplitsAndWidens) {
  const int w = 3, h = 3;  // odd: the last chroma sample covers one column and one row
  std::vector<uint8_t> y8(w * h), uv8(2 * 2 * 2);
  for (size_t i = 0; i < y8.size(); ++i) y8[i] = static_cast<uint8_t>(10 + i);
  for (size_t i = 0; i < uv8.size(); ++i) uv8[i] = static_cast<uint8_t>(100 + i);
  HostFrame a({PixelFormat::YUV420P, w, h, {25, 1}}, false);
  split_semi_planar_cpu({y8.data(), w, uv8.data(), 4, 8}, a.view());
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) EXPECT_EQ(a.view().row(0, y)[x], 10 + y * w + x);
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 2; ++x) {
      EXPECT_EQ(a.view().row(1, y)[x], 100 + y * 4 + 2 * x);
      EXPECT_EQ(a.view().row(2, y)[x], 101 + y * 4 + 2 * x);
    }
  // P010: 0, 1, 512 and 1023 (shifted up by 6, with junk in the low bits).
  const uint16_t tens[] = {0, 1, 512, 1023};
  const uint16_t want[] = {0, 64, 32800, 65535};
  std::vector<uint16_t> y16(4), uv16(2);
  for (int i = 0; i < 4; ++i) y16[i] = static_cast<uint16_t>(tens[i] << 6 | (i * 13 & 63));
  uv16[0] = 512 << 6;
  uv16[1] = 1023 << 6 | 63;
  HostFrame b({PixelFormat::YUV420P16, 2, 2, {25, 1}}, false);
  split_semi_planar_cpu({reinterpret_cast<uint8_t*>(y16.data()), 4, reinterpret_cast<uint8_t*>(uv16.data()), 4, 10},
                        b.view());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b.view().row16(0, i / 2)[i % 2], want[i]) << i;
  EXPECT_EQ(b.view().row16(1, 0)[0], 32800);
  EXPECT_EQ(b.view().row16(2, 0)[0], 65535);
  // P016: unchanged.
  split_semi_planar_cpu({reinterpret_cast<uint8_t*>(y16.data()), 4, reinterpret_cast<uint8_t*>(uv16.data()), 4, 16},
                        b.view());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b.view().row16(0, i / 2)[i % 2], y16[i]) << i;
}
