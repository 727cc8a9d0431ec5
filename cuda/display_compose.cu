// The display's picture composed by CUDA straight into the GL framebuffer's texture: the
// same views, letterboxing, texel choice and integer YUV -> RGB as shaders/display.frag, so
// the picture is the shader's bit for bit, without a GL texture upload or full-screen draw.
#include "cuda/display_compose.hpp"

#include <cuda_runtime.h>

#include "core/error.hpp"
#include "cpu/convert_ops.hpp"

namespace vfp::cuda {

namespace {

__device__ uchar4 texel_rgb(const ComposeFrame& f, float u, float v) {
  // Nearest texel as the shader: clamp(int(p * size)).
  int x = static_cast<int>(u * static_cast<float>(f.w)), y = static_cast<int>(v * static_cast<float>(f.h));
  x = min(max(x, 0), f.w - 1);
  y = min(max(y, 0), f.h - 1);
  const uint8_t* p0 = f.planes[0] + static_cast<size_t>(y) * f.pitch[0];
  if (f.format == 2) return make_uchar4(p0[3 * x], p0[3 * x + 1], p0[3 * x + 2], 255);  // rgb24
  if (f.format == 3) return make_uchar4(p0[3 * x + 2], p0[3 * x + 1], p0[3 * x], 255);  // bgr24
  const int Y = p0[x];
  if (f.format == 0) return make_uchar4(Y, Y, Y, 255);
  const int cx = x >> f.chroma_shift, cy = y >> f.chroma_shift;
  const int U = f.planes[1][static_cast<size_t>(cy) * f.pitch[1] + cx];
  const int V = f.planes[2][static_cast<size_t>(cy) * f.pitch[2] + cx];
  const int* k = f.yuv;  // cy, rv, gu, gv, bu, yoff
  const int C = Y - k[5], D = U - 128, E = V - 128;
  return make_uchar4(conv::clamp255((k[0] * C + k[1] * E + 128) >> 8),
                     conv::clamp255((k[0] * C + k[2] * D + k[3] * E + 128) >> 8),
                     conv::clamp255((k[0] * C + k[4] * D + 128) >> 8), 255);
}

// One framebuffer pixel; GL's rows run bottom up.
__global__ void compose_kernel(cudaSurfaceObject_t surf, int fb_w, int fb_h, ComposeFrame a, ComposeFrame b,
                               ComposeParams p) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= fb_w || y >= fb_h) return;
  // Normalised device coordinates of the pixel centre, then the quad's corner coordinates.
  const float nx = (x + 0.5f) / fb_w * 2.f - 1.f, ny = (y + 0.5f) / fb_h * 2.f - 1.f;
  const float cx = (nx - p.rect[0]) / (p.rect[2] - p.rect[0]), cy = (ny - p.rect[1]) / (p.rect[3] - p.rect[1]);
  uchar4 c = make_uchar4(20, 20, 20, 255);  // the clear colour, 0.08
  if (cx >= 0.f && cx < 1.f && cy >= 0.f && cy < 1.f) {
    const float u = cx, v = 1.f - cy;
    if (p.view == 1) {
      c = u < p.divider ? texel_rgb(b, u, v) : texel_rgb(a, u, v);
      if (fabsf(u - p.divider) < 0.0015f) c = make_uchar4(255, 217, 25, 255);  // the shader's divider colour
    } else if (p.view == 2) {
      c = u < 0.5f ? texel_rgb(b, u * 2.f, v) : texel_rgb(a, u * 2.f - 1.f, v);
    } else if (p.view == 3) {
      const uchar4 s = texel_rgb(a, u, v), t = texel_rgb(b, u, v);
      auto d = [&](int m, int n) {
        return static_cast<unsigned char>(min(255.f, rintf(fabsf(static_cast<float>(m - n)) * p.diff_gain)));
      };
      c = make_uchar4(d(s.x, t.x), d(s.y, t.y), d(s.z, t.z), 255);
    } else {
      c = texel_rgb(a, u, v);
    }
  }
  surf2Dwrite(c, surf, x * 4, y);
}

}  // namespace

void compose_rgba_async(unsigned long long surf, int fb_w, int fb_h, const ComposeFrame& a, const ComposeFrame& b,
                        const ComposeParams& p, StreamHandle s) {
  const dim3 block(32, 8), grid((fb_w + 31) / 32, (fb_h + 7) / 8);
  compose_kernel<<<grid, block, 0, s>>>(surf, fb_w, fb_h, a, b, p);
  VFP_CUDA_LAUNCHED("compose_kernel");
}

}  // namespace vfp::cuda
