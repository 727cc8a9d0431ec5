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

}  // namespace

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
