// Pixel format conversion arithmetic, shared by the CPU reference and the CUDA kernel.
//
// Definitions (integer, exact; docs/formats.md has the tables). With the coefficients of
// the frame's matrix and range (YuvMatrix; BT.601 limited shown, as ffmpeg's default):
//   RGB -> YUV:
//     Y = ((66R + 129G + 25B + 128) >> 8) + 16                        (+ 0 in full range)
//     U = floor((sum_i(-38R - 74G + 112B) + 128n) / 256n) + 128     (n pixels averaged)
//     V = floor((sum_i(112R - 94G - 18B) + 128n) / 256n) + 128
//   YUV -> RGB: C=Y-16 (Y in full range), D=U-128, E=V-128
//     R = clamp((298C + 409E + 128) >> 8), G = clamp((298C - 100D - 208E + 128) >> 8),
//     B = clamp((298C + 516D + 128) >> 8)
//   4:4:4 -> 4:2:0 chroma: rounded mean of the (up to 4) covered samples, (sum + n/2) / n
//   4:2:0 -> 4:4:4 chroma: nearest (each chroma sample covers its 2x2 block)
//   gray <-> YUV: the Y plane is carried unchanged, chroma set to 128
//   RGB -> gray: the matrix's full-range luma, BT.601: (77R + 150G + 29B + 128) >> 8;
//   gray -> RGB: R=G=B
// Odd widths/heights: the last chroma column/row averages the samples that exist.
// 16-bit formats (value = 8-bit value * 257): 8 -> 16 multiplies by 257, 16 -> 8 is
// (v + 128) / 257; between two 16-bit layouts the rules above run on 16-bit samples.
#pragma once
#include <cstdint>
#include <type_traits>

#include "core/frame.hpp"
#include "core/hd.hpp"

namespace vfp::conv {

VFP_HD int clamp255(int v) { return v < 0 ? 0 : (v > 255 ? 255 : v); }
VFP_HD int floor_div(int a, int b) {  // b > 0
  int q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}
// Integer coefficients (in 1/256) of one matrix and range: the real ones (from Kr, Kb and
// the range's scales 219/255 and 224/255, or 1 in full range) rounded to nearest; where the
// rounded row does not sum to what it must (220 or 256 for luma, 0 for chroma, so that white
// and grays are exact), the coefficient rounded furthest in that direction takes the rest.
struct YuvMatrix {
  int yr, yg, yb, yoff;    // RGB -> Y
  int ur, ug, ub;          // RGB -> U numerator
  int vr, vg, vb;          // RGB -> V numerator
  int cy, rv, gu, gv, bu;  // YUV -> RGB
  int gr, gg, gb;          // RGB -> gray (the matrix's full-range luma)
};
// BT.601, BT.709, BT.2020 (non-constant luminance), each in limited and full range.
constexpr YuvMatrix kYuvMatrices[3][2] = {
    {{66, 129, 25, 16, -38, -74, 112, 112, -94, -18, 298, 409, -100, -208, 516, 77, 150, 29},
     {77, 150, 29, 0, -43, -85, 128, 128, -107, -21, 256, 359, -88, -183, 454, 77, 150, 29}},
    {{47, 157, 16, 16, -26, -87, 113, 112, -102, -10, 298, 459, -55, -136, 541, 54, 183, 19},
     {54, 183, 19, 0, -29, -99, 128, 128, -116, -12, 256, 403, -48, -120, 475, 54, 183, 19}},
    {{58, 149, 13, 16, -31, -81, 112, 112, -103, -9, 298, 430, -48, -167, 548, 67, 174, 15},
     {67, 174, 15, 0, -36, -92, 128, 128, -118, -10, 256, 377, -42, -146, 482, 67, 174, 15}},
};
// The coefficients of a colour description (Unspecified parts resolved for width x height).
inline YuvMatrix yuv_matrix(ColorDesc c, int width, int height) {
  c = c.resolved(width, height);
  const int m = c.matrix == ColorMatrix::BT709 ? 1 : c.matrix == ColorMatrix::BT2020 ? 2 : 0;
  return kYuvMatrices[m][c.range == ColorRange::Full ? 1 : 0];
}

VFP_HD int rgb_to_y(const YuvMatrix& m, int r, int g, int b) {
  return ((m.yr * r + m.yg * g + m.yb * b + 128) >> 8) + m.yoff;
}
VFP_HD int rgb_to_u_num(const YuvMatrix& m, int r, int g, int b) { return m.ur * r + m.ug * g + m.ub * b; }
VFP_HD int rgb_to_v_num(const YuvMatrix& m, int r, int g, int b) { return m.vr * r + m.vg * g + m.vb * b; }
VFP_HD int chroma_from_num(int sum, int n) { return clamp255(floor_div(sum + 128 * n, 256 * n) + 128); }
VFP_HD int rgb_to_gray(const YuvMatrix& m, int r, int g, int b) { return (m.gr * r + m.gg * g + m.gb * b + 128) >> 8; }
VFP_HD void yuv_to_rgb(const YuvMatrix& m, int y, int u, int v, int& r, int& g, int& b) {
  const int c = y - m.yoff, d = u - 128, e = v - 128;
  r = clamp255((m.cy * c + m.rv * e + 128) >> 8);
  g = clamp255((m.cy * c + m.gu * d + m.gv * e + 128) >> 8);
  b = clamp255((m.cy * c + m.bu * d + 128) >> 8);
}

constexpr int kGray = static_cast<int>(PixelFormat::GRAY8);
constexpr int k420 = static_cast<int>(PixelFormat::YUV420P);
constexpr int k444 = static_cast<int>(PixelFormat::YUV444P);
constexpr int kBGR = static_cast<int>(PixelFormat::BGR24);
constexpr int kRGB = static_cast<int>(PixelFormat::RGB24);
constexpr int kGray16 = static_cast<int>(PixelFormat::GRAY16);
constexpr int k420_16 = static_cast<int>(PixelFormat::YUV420P16);
constexpr int k444_16 = static_cast<int>(PixelFormat::YUV444P16);

constexpr bool is16(int f) { return is_16bit(static_cast<PixelFormat>(f)); }
// The 8-bit format of the same layout (16-bit formats differ from theirs only in depth).
constexpr int layout_of(int f) { return static_cast<int>(with_depth(static_cast<PixelFormat>(f), 8)); }

// Sample access in the conversion's working scale: 16-bit samples as they are when both
// ends are 16-bit (`raw16`), otherwise on the 8-bit scale (16-bit reads are rounded to the
// nearest 8-bit level, 16-bit writes scaled up by 257).
template <int F, bool raw16>
VFP_HD int load(const ImageView& v, int p, int x, int y) {
  if constexpr (is16(F)) {
    const int s = v.row16(p, y)[x];
    return raw16 ? s : to8(s);
  } else {
    return v.row(p, y)[x];
  }
}
template <int F, bool raw16>
VFP_HD void store(const ImageView& v, int p, int x, int y, int val) {
  if constexpr (is16(F))
    v.row16(p, y)[x] = static_cast<unsigned short>(raw16 ? val : to16(val));
  else
    v.row(p, y)[x] = static_cast<unsigned char>(val);
}

// Converts the 2x2 block (bx, by) of `s` (format SF) into `d` (format DF). One call per
// block covers every output sample exactly once, including 4:2:0 chroma. Between two 16-bit
// formats the planar rules (copy Y, average or repeat chroma, neutral chroma 128 * 257) work
// on the 16-bit samples; every other pair works on 8 bits (RGB is 8-bit only).
template <int SF, int DF>
VFP_HD void convert_block(const ImageView& s, const ImageView& d, int bx, int by, const YuvMatrix& m) {
  constexpr bool w16 = is16(SF) && is16(DF);
  constexpr int SL = layout_of(SF), DL = layout_of(DF);
  constexpr int neutral = w16 ? 128 * kScale16 : 128;
  constexpr bool src_rgb = (SL == kBGR || SL == kRGB);
  int csum_u = 0, csum_v = 0, n = 0;
  const int x0 = 2 * bx, y0 = 2 * by;
  for (int dy = 0; dy < 2; ++dy) {
    const int y = y0 + dy;
    if (y >= s.height) break;
    for (int dx = 0; dx < 2; ++dx) {
      const int x = x0 + dx;
      if (x >= s.width) break;
      int Y = 0, U = neutral, V = neutral, R = 0, G = 0, B = 0;
      if (SL == kGray) {
        Y = load<SF, w16>(s, 0, x, y);
      } else if (SL == k420) {
        Y = load<SF, w16>(s, 0, x, y);
        U = load<SF, w16>(s, 1, x >> 1, y >> 1);
        V = load<SF, w16>(s, 2, x >> 1, y >> 1);
      } else if (SL == k444) {
        Y = load<SF, w16>(s, 0, x, y);
        U = load<SF, w16>(s, 1, x, y);
        V = load<SF, w16>(s, 2, x, y);
      } else {
        const unsigned char* p = s.row(0, y) + 3 * x;
        if (SL == kBGR) {
          B = p[0];
          G = p[1];
          R = p[2];
        } else {
          R = p[0];
          G = p[1];
          B = p[2];
        }
      }
      if (DL == kGray) {
        store<DF, w16>(d, 0, x, y, src_rgb ? rgb_to_gray(m, R, G, B) : Y);
      } else if (DL == k444 || DL == k420) {
        int u_num = 0, v_num = 0;
        if (src_rgb) {
          Y = rgb_to_y(m, R, G, B);
          u_num = rgb_to_u_num(m, R, G, B);
          v_num = rgb_to_v_num(m, R, G, B);
        }
        store<DF, w16>(d, 0, x, y, Y);
        if (DL == k444) {
          store<DF, w16>(d, 1, x, y, src_rgb ? chroma_from_num(u_num, 1) : U);
          store<DF, w16>(d, 2, x, y, src_rgb ? chroma_from_num(v_num, 1) : V);
        } else {
          csum_u += src_rgb ? u_num : U;
          csum_v += src_rgb ? v_num : V;
          ++n;
        }
      } else {  // packed RGB destination
        if (!src_rgb) {
          if (SL == kGray) {
            R = G = B = Y;
          } else {
            yuv_to_rgb(m, Y, U, V, R, G, B);
          }
        }
        unsigned char* p = d.row(0, y) + 3 * x;
        if (DL == kBGR) {
          p[0] = static_cast<unsigned char>(B);
          p[1] = static_cast<unsigned char>(G);
          p[2] = static_cast<unsigned char>(R);
        } else {
          p[0] = static_cast<unsigned char>(R);
          p[1] = static_cast<unsigned char>(G);
          p[2] = static_cast<unsigned char>(B);
        }
      }
    }
  }
  if (DL == k420 && n > 0) {
    int u = src_rgb ? chroma_from_num(csum_u, n) : (csum_u + n / 2) / n;
    int v = src_rgb ? chroma_from_num(csum_v, n) : (csum_v + n / 2) / n;
    store<DF, w16>(d, 1, bx, by, u);
    store<DF, w16>(d, 2, bx, by, v);
  }
}

// Calls fn(std::integral_constant<int, F>) for a runtime format; false for an unknown one.
template <typename Fn>
bool with_format(PixelFormat f, Fn&& fn) {
  switch (static_cast<int>(f)) {
    case kGray:
      fn(std::integral_constant<int, kGray>{});
      return true;
    case k420:
      fn(std::integral_constant<int, k420>{});
      return true;
    case k444:
      fn(std::integral_constant<int, k444>{});
      return true;
    case kBGR:
      fn(std::integral_constant<int, kBGR>{});
      return true;
    case kRGB:
      fn(std::integral_constant<int, kRGB>{});
      return true;
    case kGray16:
      fn(std::integral_constant<int, kGray16>{});
      return true;
    case k420_16:
      fn(std::integral_constant<int, k420_16>{});
      return true;
    case k444_16:
      fn(std::integral_constant<int, k444_16>{});
      return true;
  }
  return false;
}

// A sample of `bits` bits (9..16) to vfpipe's 16-bit scale, rounding to nearest (the exact
// inverse of narrow_from16): v * 65535 / (2^bits - 1). 16 bits: unchanged.
VFP_HD uint16_t widen_to16(uint16_t v, int bits) {
  const uint32_t m = (1u << bits) - 1;
  return static_cast<uint16_t>((v * 65535u + m / 2) / m);
}
VFP_HD uint16_t narrow_from16(uint16_t v, int bits) {
  const uint32_t m = (1u << bits) - 1;
  return static_cast<uint16_t>((v * m + 32767u) / 65535u);
}

// One sample of a semi-planar picture (SemiPlanar, cpu/convert.hpp) on vfpipe's scale: 8-bit
// as it is; 16-bit containers hold `bits` significant bits at the top.
VFP_HD uint16_t semi_planar_sample(const uint8_t* row, int x, int bits) {
  if (bits == 8) return row[x];
  const uint16_t v = reinterpret_cast<const uint16_t*>(row)[x];
  return widen_to16(static_cast<uint16_t>(v >> (16 - bits)), bits);
}

}  // namespace vfp::conv
