// Format conversion kernel: one thread per 2x2 block, so 4:2:0 chroma is produced by
// the thread that owns its four luma samples (no races, no second pass).
#include <cuda_runtime.h>

#include "core/error.hpp"
#include "cpu/convert_ops.hpp"
#include "cuda/kernels.hpp"

namespace vfp::cuda {

namespace {

template <int SF, int DF>
__global__ void convert_kernel(ImageView s, ImageView d, int bw, int bh, conv::YuvMatrix m) {
  const int bx = blockIdx.x * blockDim.x + threadIdx.x;
  const int by = blockIdx.y * blockDim.y + threadIdx.y;
  if (bx >= bw || by >= bh) return;
  conv::convert_block<SF, DF>(s, d, bx, by, m);
}

template <int SF, int DF>
void launch(const ImageView& s, const ImageView& d, StreamHandle st, const conv::YuvMatrix& m) {
  const int bw = (s.width + 1) / 2, bh = (s.height + 1) / 2;
  dim3 block(32, 8);
  dim3 grid((bw + block.x - 1) / block.x, (bh + block.y - 1) / block.y);
  convert_kernel<SF, DF><<<grid, block, 0, st>>>(s, d, bw, bh, m);
  VFP_CUDA_LAUNCHED("convert_kernel");
}

// One thread per 2x2 luma block and its chroma pair.
__global__ void split_semi_planar_kernel(SemiPlanar sp, ImageView d) {
  const int bx = blockIdx.x * blockDim.x + threadIdx.x;
  const int by = blockIdx.y * blockDim.y + threadIdx.y;
  if (bx >= d.pw[1] || by >= d.ph[1]) return;
  const bool deep = sp.bits > 8;
  for (int dy = 0; dy < 2; ++dy) {
    const int y = 2 * by + dy;
    if (y >= d.ph[0]) break;
    const uint8_t* s = sp.luma + static_cast<ptrdiff_t>(y) * sp.luma_pitch;
    for (int dx = 0; dx < 2; ++dx) {
      const int x = 2 * bx + dx;
      if (x >= d.pw[0]) break;
      const uint16_t v = conv::semi_planar_sample(s, x, sp.bits);
      if (deep)
        d.row16(0, y)[x] = v;
      else
        d.row(0, y)[x] = static_cast<uint8_t>(v);
    }
  }
  const uint8_t* c = sp.chroma + static_cast<ptrdiff_t>(by) * sp.chroma_pitch;
  const uint16_t u = conv::semi_planar_sample(c, 2 * bx, sp.bits), v = conv::semi_planar_sample(c, 2 * bx + 1, sp.bits);
  if (deep) {
    d.row16(1, by)[bx] = u;
    d.row16(2, by)[bx] = v;
  } else {
    d.row(1, by)[bx] = static_cast<uint8_t>(u);
    d.row(2, by)[bx] = static_cast<uint8_t>(v);
  }
}

}  // namespace

void split_semi_planar_async(const SemiPlanar& src, const ImageView& d, StreamHandle st) {
  const bool ok = (src.bits == 8 && d.format == PixelFormat::YUV420P) ||
                  (src.bits > 8 && src.bits <= 16 && d.format == PixelFormat::YUV420P16);
  if (!ok) throw Error(ErrorKind::Internal, "split_semi_planar_async: not a semi-planar 4:2:0 picture for this format");
  dim3 block(32, 8);
  dim3 grid((d.pw[1] + block.x - 1) / block.x, (d.ph[1] + block.y - 1) / block.y);
  split_semi_planar_kernel<<<grid, block, 0, st>>>(src, d);
  VFP_CUDA_LAUNCHED("split_semi_planar_kernel");
}

void convert_async(const ImageView& s, const ImageView& d, StreamHandle st, const ColorDesc& color) {
  if (s.width != d.width || s.height != d.height) throw Error(ErrorKind::Internal, "convert_async: size mismatch");
  const conv::YuvMatrix m = conv::yuv_matrix(color, s.width, s.height);
  bool ok = false;
  conv::with_format(s.format, [&](auto SF) {
    ok = conv::with_format(d.format, [&](auto DF) { launch<decltype(SF)::value, decltype(DF)::value>(s, d, st, m); });
  });
  if (!ok) throw Error(ErrorKind::Internal, "convert_async: bad pixel format");
}

void copy_image_async(const ImageView& s, const ImageView& d, StreamHandle st) {
  const int planes = plane_count(s.format);
  const int bpp = sample_bytes(s.format);
  for (int p = 0; p < planes; ++p)
    VFP_CUDA(cudaMemcpy2DAsync(d.data[p], d.pitch[p], s.data[p], s.pitch[p], static_cast<size_t>(s.pw[p]) * bpp,
                               s.ph[p], cudaMemcpyDeviceToDevice, st));
}

void copy_plane_async(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h, StreamHandle s) {
  VFP_CUDA(cudaMemcpy2DAsync(dst, dpitch, src, spitch, static_cast<size_t>(w), h, cudaMemcpyDeviceToDevice, s));
}

}  // namespace vfp::cuda
