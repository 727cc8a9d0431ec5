// Pixel format conversion arithmetic, shared by the CPU reference and the CUDA kernel.
//
// Definitions (integer, exact; docs/formats.md has the table):
//   RGB -> YUV (BT.601, limited range, as ffmpeg's default):
//     Y = ((66R + 129G + 25B + 128) >> 8) + 16
//     U = floor((sum_i(-38R - 74G + 112B) + 128n) / 256n) + 128     (n pixels averaged)
//     V = floor((sum_i(112R - 94G - 18B) + 128n) / 256n) + 128
//   YUV -> RGB: C=Y-16, D=U-128, E=V-128
//     R = clamp((298C + 409E + 128) >> 8), G = clamp((298C - 100D - 208E + 128) >> 8),
//     B = clamp((298C + 516D + 128) >> 8)
//   4:4:4 -> 4:2:0 chroma: rounded mean of the (up to 4) covered samples, (sum + n/2) / n
//   4:2:0 -> 4:4:4 chroma: nearest (each chroma sample covers its 2x2 block)
//   gray <-> YUV: the Y plane is carried unchanged, chroma set to 128
//   RGB -> gray: full-range BT.601 luma (77R + 150G + 29B + 128) >> 8; gray -> RGB: R=G=B
// Odd widths/heights: the last chroma column/row averages the samples that exist.
#pragma once
#include "pipeline/frame.hpp"
#include "pipeline/hd.hpp"

namespace vfp::conv {

VFP_HD int clamp255(int v) { return v < 0 ? 0 : (v > 255 ? 255 : v); }
VFP_HD int floor_div(int a, int b) {  // b > 0
  int q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}
VFP_HD int rgb_to_y(int r, int g, int b) { return ((66 * r + 129 * g + 25 * b + 128) >> 8) + 16; }
VFP_HD int rgb_to_u_num(int r, int g, int b) { return -38 * r - 74 * g + 112 * b; }
VFP_HD int rgb_to_v_num(int r, int g, int b) { return 112 * r - 94 * g - 18 * b; }
VFP_HD int chroma_from_num(int sum, int n) {
  return clamp255(floor_div(sum + 128 * n, 256 * n) + 128);
}
VFP_HD int rgb_to_gray(int r, int g, int b) { return (77 * r + 150 * g + 29 * b + 128) >> 8; }
VFP_HD void yuv_to_rgb(int y, int u, int v, int& r, int& g, int& b) {
  int c = y - 16, d = u - 128, e = v - 128;
  r = clamp255((298 * c + 409 * e + 128) >> 8);
  g = clamp255((298 * c - 100 * d - 208 * e + 128) >> 8);
  b = clamp255((298 * c + 516 * d + 128) >> 8);
}

constexpr int kGray = static_cast<int>(PixelFormat::GRAY8);
constexpr int k420 = static_cast<int>(PixelFormat::YUV420P);
constexpr int k444 = static_cast<int>(PixelFormat::YUV444P);
constexpr int kBGR = static_cast<int>(PixelFormat::BGR24);
constexpr int kRGB = static_cast<int>(PixelFormat::RGB24);

// Converts the 2x2 block (bx, by) of `s` (format SF) into `d` (format DF). One call per
// block covers every output sample exactly once, including 4:2:0 chroma.
template <int SF, int DF>
VFP_HD void convert_block(const ImageView& s, const ImageView& d, int bx, int by) {
  constexpr bool src_rgb = (SF == kBGR || SF == kRGB);
  int csum_u = 0, csum_v = 0, n = 0;
  const int x0 = 2 * bx, y0 = 2 * by;
  for (int dy = 0; dy < 2; ++dy) {
    const int y = y0 + dy;
    if (y >= s.height) break;
    for (int dx = 0; dx < 2; ++dx) {
      const int x = x0 + dx;
      if (x >= s.width) break;
      int Y = 0, U = 128, V = 128, R = 0, G = 0, B = 0;
      if (SF == kGray) {
        Y = s.row(0, y)[x];
      } else if (SF == k420) {
        Y = s.row(0, y)[x];
        U = s.row(1, y >> 1)[x >> 1];
        V = s.row(2, y >> 1)[x >> 1];
      } else if (SF == k444) {
        Y = s.row(0, y)[x];
        U = s.row(1, y)[x];
        V = s.row(2, y)[x];
      } else {
        const unsigned char* p = s.row(0, y) + 3 * x;
        if (SF == kBGR) {
          B = p[0]; G = p[1]; R = p[2];
        } else {
          R = p[0]; G = p[1]; B = p[2];
        }
      }
      if (DF == kGray) {
        d.row(0, y)[x] = static_cast<unsigned char>(src_rgb ? rgb_to_gray(R, G, B) : Y);
      } else if (DF == k444 || DF == k420) {
        int u_num = 0, v_num = 0;
        if (src_rgb) {
          Y = rgb_to_y(R, G, B);
          u_num = rgb_to_u_num(R, G, B);
          v_num = rgb_to_v_num(R, G, B);
        }
        d.row(0, y)[x] = static_cast<unsigned char>(Y);
        if (DF == k444) {
          d.row(1, y)[x] = static_cast<unsigned char>(src_rgb ? chroma_from_num(u_num, 1) : U);
          d.row(2, y)[x] = static_cast<unsigned char>(src_rgb ? chroma_from_num(v_num, 1) : V);
        } else {
          csum_u += src_rgb ? u_num : U;
          csum_v += src_rgb ? v_num : V;
          ++n;
        }
      } else {  // packed RGB destination
        if (!src_rgb) {
          if (SF == kGray) {
            R = G = B = Y;
          } else {
            yuv_to_rgb(Y, U, V, R, G, B);
          }
        }
        unsigned char* p = d.row(0, y) + 3 * x;
        if (DF == kBGR) {
          p[0] = static_cast<unsigned char>(B); p[1] = static_cast<unsigned char>(G); p[2] = static_cast<unsigned char>(R);
        } else {
          p[0] = static_cast<unsigned char>(R); p[1] = static_cast<unsigned char>(G); p[2] = static_cast<unsigned char>(B);
        }
      }
    }
  }
  if (DF == k420 && n > 0) {
    int u = src_rgb ? chroma_from_num(csum_u, n) : (csum_u + n / 2) / n;
    int v = src_rgb ? chroma_from_num(csum_v, n) : (csum_v + n / 2) / n;
    d.row(1, by)[bx] = static_cast<unsigned char>(u);
    d.row(2, by)[bx] = static_cast<unsigned char>(v);
  }
}

}  // namespace vfp::conv
