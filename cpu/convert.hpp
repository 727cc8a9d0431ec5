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
// Copies every plane (same spec).
void copy_image_cpu(const ImageView& src, const ImageView& dst);

}  // namespace vfp
