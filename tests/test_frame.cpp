#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/frame.hpp"
#include "test_util.hpp"

using namespace vfp;

TEST(Frame, LayoutOfOddYuv420) {
  FrameSpec s{PixelFormat::YUV420P, 1921, 1081, {25, 1}};
  FrameLayout L = FrameLayout::of(s);
  ASSERT_EQ(L.planes, 3);
  EXPECT_EQ(L.plane[0].width, 1921);
  EXPECT_EQ(L.plane[1].width, 961);
  EXPECT_EQ(L.plane[1].height, 541);
  EXPECT_EQ(L.plane[2].height, 541);
  for (int p = 0; p < 3; ++p) {
    EXPECT_EQ(L.plane[p].pitch % kPitchAlign, 0u);
    EXPECT_GE(L.plane[p].pitch, static_cast<size_t>(L.plane[p].width_bytes));
  }
  EXPECT_EQ(L.payload_bytes, 1921u * 1081 + 2u * 961 * 541);
  EXPECT_EQ(L.plane[1].offset, L.plane[0].pitch * 1081);
}

TEST(Frame, LayoutOfPackedAndGray) {
  FrameLayout bgr = FrameLayout::of({PixelFormat::BGR24, 3, 7, {25, 1}});
  EXPECT_EQ(bgr.planes, 1);
  EXPECT_EQ(bgr.plane[0].width_bytes, 9);
  EXPECT_EQ(bgr.payload_bytes, 63u);
  FrameLayout g = FrameLayout::of({PixelFormat::GRAY8, 1, 1, {25, 1}});
  EXPECT_EQ(g.payload_bytes, 1u);
  FrameLayout y444 = FrameLayout::of({PixelFormat::YUV444P, 5, 3, {25, 1}});
  EXPECT_EQ(y444.payload_bytes, 45u);
}

TEST(Frame, PackedRoundTripKeepsPixels) {
  for (PixelFormat f :
       {PixelFormat::GRAY8, PixelFormat::YUV420P, PixelFormat::YUV444P, PixelFormat::BGR24, PixelFormat::RGB24}) {
    FrameSpec s{f, 13, 5, {25, 1}};
    HostFrame a(s, false), b(s, false);
    test::fill_random(a, 3);
    std::vector<uint8_t> packed(a.layout().payload_bytes);
    a.store_packed(packed.data());
    b.load_packed(packed.data());
    EXPECT_TRUE(a.same_pixels(b)) << pix_fmt_name(f);
  }
}

TEST(Frame, ValidateRejectsZeroAndHugeSizes) {
  EXPECT_THROW(validate_spec({PixelFormat::GRAY8, 0, 10, {25, 1}}, "x"), Error);
  EXPECT_THROW(validate_spec({PixelFormat::GRAY8, 10, -1, {25, 1}}, "x"), Error);
  EXPECT_THROW(validate_spec({PixelFormat::GRAY8, kMaxDimension + 1, 10, {25, 1}}, "x"), Error);
  EXPECT_NO_THROW(validate_spec({PixelFormat::GRAY8, 1, 1, {25, 1}}, "x"));
}

TEST(Frame, PixelFormatNames) {
  PixelFormat f;
  EXPECT_TRUE(parse_pix_fmt("gray", &f));
  EXPECT_EQ(f, PixelFormat::GRAY8);
  EXPECT_TRUE(parse_pix_fmt("yuv420p", &f));
  EXPECT_EQ(f, PixelFormat::YUV420P);
  EXPECT_TRUE(parse_pix_fmt("bgr24", &f));
  EXPECT_EQ(f, PixelFormat::BGR24);
  EXPECT_FALSE(parse_pix_fmt("nv12", &f));
  EXPECT_STREQ(pix_fmt_name(PixelFormat::YUV444P), "yuv444p");
  // ffmpeg's deep planar names: carried at 16 bits, their depth for the encoder.
  int bits = 0;
  EXPECT_TRUE(parse_pix_fmt("yuv420p10le", &f, &bits));
  EXPECT_EQ(f, PixelFormat::YUV420P16);
  EXPECT_EQ(bits, 10);
  EXPECT_TRUE(parse_pix_fmt("yuv444p12", &f, &bits));
  EXPECT_EQ(f, PixelFormat::YUV444P16);
  EXPECT_EQ(bits, 12);
  EXPECT_TRUE(parse_pix_fmt("gray10le", &f, &bits));
  EXPECT_EQ(f, PixelFormat::GRAY16);
  EXPECT_TRUE(parse_pix_fmt("yuv420p", &f, &bits));
  EXPECT_EQ(bits, 8);
  EXPECT_TRUE(parse_pix_fmt("gray16le", &f, &bits));
  EXPECT_EQ(bits, 16);
  EXPECT_FALSE(parse_pix_fmt("yuv420p11le", &f, &bits));
  EXPECT_FALSE(parse_pix_fmt("yuv420p10be", &f, &bits));
  EXPECT_FALSE(parse_pix_fmt("yuv420p10le", &f));  // not a format of vfpipe's frames
}
