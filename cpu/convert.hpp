// Pixel format conversion (CPU reference). Used by the `format` stage, by sources that
// produce a format other than their native one, and by tests.
#pragma once
#include "core/frame.hpp"

namespace vfp {

// Converts `src` into `dst` (same width/height, any formats). Exact integer arithmetic,
// defined in cpu/convert_ops.hpp; the CUDA kernel is bit-identical. RGB <-> YUV uses the
// matrix and range of `color` (the YUV side's; unspecified parts resolved as players do:
// ColorDesc::resolved).
void convert_cpu(const ImageView& src, const ImageView& dst, const ColorDesc& color = {});
// A semi-planar 4:2:0 picture as GPU video decoders give it (NV12; P010 / P016: `bits`
// significant bits in the high bits of 16-bit samples): a luma plane and one plane of
// interleaved U, V samples.
struct SemiPlanar {
  const uint8_t* luma = nullptr;
  int luma_pitch = 0;  // bytes
  const uint8_t* chroma = nullptr;
  int chroma_pitch = 0;
  int bits = 8;  // 8: NV12; 10, 12, 16: 16-bit samples
};
// Into planar yuv420p (bits 8) or yuv420p16le (widened to vfpipe's 16-bit scale, rounding
// to nearest: conv::widen_to16), `dst`'s size. The CUDA version is bit-identical.
void split_semi_planar_cpu(const SemiPlanar& src, const ImageView& dst);
// Copies every plane (same spec).
void copy_image_cpu(const ImageView& src, const ImageView& dst);

}  // namespace vfp
