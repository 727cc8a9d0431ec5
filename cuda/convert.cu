// Format conversion kernel: one thread per 2x2 block, so 4:2:0 chroma is produced by
// the thread that owns its four luma samples (no races, no second pass).
#include <cuda_runtime.h>

#include "cuda/kernels.hpp"
#include "pipeline/error.hpp"
#include "stages/convert_ops.hpp"

namespace vfp::cuda {

namespace {

template <int SF, int DF>
__global__ void convert_kernel(ImageView s, ImageView d, int bw, int bh) {
  const int bx = blockIdx.x * blockDim.x + threadIdx.x;
  const int by = blockIdx.y * blockDim.y + threadIdx.y;
  if (bx >= bw || by >= bh) return;
  conv::convert_block<SF, DF>(s, d, bx, by);
}

template <int SF, int DF>
void launch(const ImageView& s, const ImageView& d, StreamHandle st) {
  const int bw = (s.width + 1) / 2, bh = (s.height + 1) / 2;
  dim3 block(32, 8);
  dim3 grid((bw + block.x - 1) / block.x, (bh + block.y - 1) / block.y);
  convert_kernel<SF, DF><<<grid, block, 0, st>>>(s, d, bw, bh);
  VFP_CUDA_LAUNCHED("convert_kernel");
}

template <int SF>
void launch_to(const ImageView& s, const ImageView& d, StreamHandle st) {
  switch (static_cast<int>(d.format)) {
    case conv::kGray: return launch<SF, conv::kGray>(s, d, st);
    case conv::k420: return launch<SF, conv::k420>(s, d, st);
    case conv::k444: return launch<SF, conv::k444>(s, d, st);
    case conv::kBGR: return launch<SF, conv::kBGR>(s, d, st);
    case conv::kRGB: return launch<SF, conv::kRGB>(s, d, st);
  }
  throw Error(ErrorKind::Internal, "convert_async: bad destination format");
}

}  // namespace

void convert_async(const ImageView& s, const ImageView& d, StreamHandle st) {
  if (s.width != d.width || s.height != d.height)
    throw Error(ErrorKind::Internal, "convert_async: size mismatch");
  switch (static_cast<int>(s.format)) {
    case conv::kGray: return launch_to<conv::kGray>(s, d, st);
    case conv::k420: return launch_to<conv::k420>(s, d, st);
    case conv::k444: return launch_to<conv::k444>(s, d, st);
    case conv::kBGR: return launch_to<conv::kBGR>(s, d, st);
    case conv::kRGB: return launch_to<conv::kRGB>(s, d, st);
  }
  throw Error(ErrorKind::Internal, "convert_async: bad source format");
}

void copy_image_async(const ImageView& s, const ImageView& d, StreamHandle st) {
  const int planes = plane_count(s.format);
  const int bpp = is_packed_rgb(s.format) ? 3 : 1;
  for (int p = 0; p < planes; ++p)
    VFP_CUDA(cudaMemcpy2DAsync(d.data[p], d.pitch[p], s.data[p], s.pitch[p],
                               static_cast<size_t>(s.pw[p]) * bpp, s.ph[p],
                               cudaMemcpyDeviceToDevice, st));
}

void copy_plane_async(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h,
                      StreamHandle s) {
  VFP_CUDA(cudaMemcpy2DAsync(dst, dpitch, src, spitch, static_cast<size_t>(w), h,
                             cudaMemcpyDeviceToDevice, s));
}

}  // namespace vfp::cuda
