// Border modes shared by the spatial stages (median, convolution), CPU and CUDA alike.
// Indices far outside the image (windows larger than the frame) are folded periodically,
// so every mode is defined for any offset.
#pragma once
#include <string>

#include "core/hd.hpp"

namespace vfp {

enum class Border : int {
  Replicate = 0,   // aaa|abcd|ddd
  Reflect101 = 1,  // dcb|abcd|cba   (OpenCV BORDER_REFLECT_101)
  Reflect = 2,     // cba|abcd|dcb   (OpenCV BORDER_REFLECT, "symmetric")
  Constant = 3,    // vvv|abcd|vvv
  Wrap = 4,        // bcd|abcd|abc
};

// Maps index i into 0..n-1 under border mode b; -1 means "the constant value".
VFP_HD int border_index(int i, int n, Border b) {
  if (i >= 0 && i < n) return i;
  switch (b) {
    case Border::Replicate:
      return i < 0 ? 0 : n - 1;
    case Border::Reflect: {
      const int p = 2 * n;
      i %= p;
      if (i < 0) i += p;
      return i < n ? i : p - 1 - i;
    }
    case Border::Reflect101: {
      if (n == 1) return 0;
      const int p = 2 * n - 2;
      i %= p;
      if (i < 0) i += p;
      return i < n ? i : p - i;
    }
    case Border::Wrap:
      i %= n;
      return i < 0 ? i + n : i;
    case Border::Constant:
      return -1;
  }
  return -1;
}

inline const char* border_name(Border b) {
  switch (b) {
    case Border::Replicate:
      return "replicate";
    case Border::Reflect101:
      return "reflect101";
    case Border::Reflect:
      return "reflect";
    case Border::Constant:
      return "constant";
    case Border::Wrap:
      return "wrap";
  }
  return "?";
}

inline bool parse_border(const std::string& s, Border* b) {
  for (Border c : {Border::Replicate, Border::Reflect101, Border::Reflect, Border::Constant, Border::Wrap})
    if (s == border_name(c)) {
      *b = c;
      return true;
    }
  return false;
}

}  // namespace vfp
