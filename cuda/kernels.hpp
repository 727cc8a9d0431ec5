// Host-side launchers of the CUDA kernels. Declared here so that stage code compiled by
// the host compiler can call them; all run asynchronously on the given stream.
#pragma once
#include "core/frame.hpp"
#include "core/gpu.hpp"
#include "cpu/convert.hpp"

namespace vfp::cuda {

// RGB <-> YUV with the matrix and range of `color` (cpu/convert.hpp: bit-identical to convert_cpu).
void convert_async(const ImageView& src, const ImageView& dst, StreamHandle s, const ColorDesc& color = {});
// Plane-by-plane copy (cudaMemcpy2DAsync), same spec on both sides.
void copy_image_async(const ImageView& src, const ImageView& dst, StreamHandle s);

// Copies one 8-bit plane (planes a stage leaves unfiltered).
void copy_plane_async(const uint8_t* src, int spitch, uint8_t* dst, int dpitch, int w, int h, StreamHandle s);

// split_semi_planar_cpu with the source planes in device memory (a GPU decoder's picture):
// bit-identical.
void split_semi_planar_async(const SemiPlanar& src, const ImageView& dst, StreamHandle s);

}  // namespace vfp::cuda
