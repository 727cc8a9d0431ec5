// PNG row filters (PNG spec, section 9), shared by the CPU encoder (png.cpp) and the GPU
// kernel (cuda/deflate.cu) so that both choose and write the same bytes.
#pragma once
#include <cstdint>

#include "core/hd.hpp"

namespace vfp::png {

VFP_HD int paeth(int a, int b, int c) {
  const int p = a + b - c;
  const int pa = p > a ? p - a : a - p, pb = p > b ? p - b : b - p, pc = p > c ? p - c : c - p;
  return (pa <= pb && pa <= pc) ? a : pb <= pc ? b : c;
}

// Byte x filtered by type f (0 None, 1 Sub, 2 Up, 3 Average, 4 Paeth) given its left (a),
// upper (b) and upper-left (c) neighbours.
VFP_HD uint8_t filtered(int f, int x, int a, int b, int c) {
  switch (f) {
    case 0:
      return static_cast<uint8_t>(x);
    case 1:
      return static_cast<uint8_t>(x - a);
    case 2:
      return static_cast<uint8_t>(x - b);
    case 3:
      return static_cast<uint8_t>(x - ((a + b) >> 1));
    default:
      return static_cast<uint8_t>(x - paeth(a, b, c));
  }
}

// libpng's row heuristic adds up each filtered byte taken as signed, in absolute value.
VFP_HD uint32_t signed_magnitude(uint8_t v) { return v < 128 ? v : 256u - v; }

}  // namespace vfp::png
