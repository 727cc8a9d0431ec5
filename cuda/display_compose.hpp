// The display's picture composed by CUDA (cuda/display_compose.cu): views, letterboxing and
// YUV -> RGB exactly as shaders/display.frag, written into the framebuffer's RGBA8 texture
// through a CUDA surface. Used by the display's GPU path (display/display_gl.cpp).
#pragma once
#include <cstdint>

#include "core/gpu.hpp"

namespace vfp::cuda {

struct ComposeFrame {
  const uint8_t* planes[3] = {nullptr, nullptr, nullptr};  // device pointers
  int pitch[3] = {0, 0, 0};
  int w = 0, h = 0;
  int format = 0;        // 0 gray, 1 yuv, 2 rgb24, 3 bgr24 (as the shader)
  int chroma_shift = 0;  // 1 for 4:2:0
  // YUV -> RGB coefficients of the frame's matrix and range (conv::YuvMatrix: cy, rv, gu,
  // gv, bu, yoff), BT.601 limited by default.
  int yuv[6] = {298, 409, -100, -208, 516, 16};
};

struct ComposeParams {
  float rect[4] = {-1, -1, 1, 1};  // the picture's quad in normalised device coordinates
  int view = 0;                    // DisplayView
  float divider = 0.5f, diff_gain = 4.f;
};

// `surf` is a cudaSurfaceObject_t over an RGBA8 array of fb_w x fb_h (GL's rows: bottom up).
void compose_rgba_async(unsigned long long surf, int fb_w, int fb_h, const ComposeFrame& a, const ComposeFrame& b,
                        const ComposeParams& p, StreamHandle s);

}  // namespace vfp::cuda
