// Shared by the stages that filter the planes of gray / yuv420p / yuv444p frames one by one
// (median, conv): the input check and the per-plane loop that filters the planes selected
// by the `planes` mask and copies the others.
#pragma once
#include <cstring>

#include "core/error.hpp"
#include "core/frame.hpp"
#include "core/log.hpp"
#include "core/options.hpp"
#include "core/parallel.hpp"
#include "cpu/border.hpp"
#if VFPIPE_HAVE_CUDA
#include "cuda/kernels.hpp"
#endif

namespace vfp {

// The options every spatial planar stage shares, in this positional order: `planes`,
// `border` (the modes it supports, `def` first by default) and `value`.
template <class S>
void declare_planes_and_border(OptionTable<S>& t, Border def, const std::vector<Border>& modes) {
  t.integer("planes", &S::planes, 15, 0, 15, "bit mask of planes to filter (others are copied)");
  t.choice("border", &S::border, def, modes, border_name, "samples outside the frame");
  t.integer("value", &S::value, 0, 0, 255, "sample value outside the frame for border=constant");
}

// Throws for packed formats (and 16-bit ones unless `high_depth`), and an
// OptionError("planes") when the mask selects none of the input's planes. Returns `in`
// (these stages keep the spec).
inline FrameSpec check_planar_input(const char* stage, const FrameSpec& in, int planes, bool high_depth = false) {
  if (!is_planar_yuv(in.format) && !(high_depth && is_16bit(in.format)))
    throw Error(ErrorKind::Input, std::string(stage) + ": unsupported pixel format " + pix_fmt_name(in.format));
  const int np = plane_count(in.format);
  if ((planes & ((1 << np) - 1)) == 0)
    throw OptionError("planes", log::format("%s: planes=%d selects none of the %d plane%s of %s", stage, planes, np,
                                            np == 1 ? "" : "s", pix_fmt_name(in.format)));
  return in;
}

// Calls fn(src, dst) with the plane pointers typed by the sample size: uint16_t for the
// 16-bit formats (`deep`), uint8_t otherwise.
template <typename Fn>
void with_samples(bool deep, const uint8_t* src, uint8_t* dst, Fn&& fn) {
  if (deep)
    fn(reinterpret_cast<const uint16_t*>(src), reinterpret_cast<uint16_t*>(dst));
  else
    fn(src, dst);
}

// filter(src, spitch, dst, dpitch, w, h, plane) for each selected plane (pitches in bytes,
// w in samples); unselected planes are copied on the host. The planes run as parallel tasks
// on the CPU pool (each filter splits its plane into stripes on the same pool, so small
// chroma planes fill threads the luma plane leaves idle); per-plane state must be indexed
// by `plane`.
template <typename F>
void for_each_plane_cpu(const ImageView& in, const ImageView& out, int planes, F&& filter) {
  parallel_rows(plane_count(in.format), 1, [&](int p0, int p1) {
    for (int pl = p0; pl < p1; ++pl) {
      if (planes & (1 << pl)) {
        filter(in.data[pl], in.pitch[pl], out.data[pl], out.pitch[pl], in.pw[pl], in.ph[pl], pl);
      } else {
        for (int y = 0; y < in.ph[pl]; ++y)
          std::memcpy(out.row(pl, y), in.row(pl, y), static_cast<size_t>(in.pw[pl]) * sample_bytes(in.format));
      }
    }
  });
}

#if VFPIPE_HAVE_CUDA
// The same on the device: unselected planes are copied on `stream`.
template <typename F>
void for_each_plane_cuda(const ImageView& in, const ImageView& out, int planes, cuda::StreamHandle stream, F&& filter) {
  for (int pl = 0; pl < plane_count(in.format); ++pl) {
    if (planes & (1 << pl))
      filter(in.data[pl], in.pitch[pl], out.data[pl], out.pitch[pl], in.pw[pl], in.ph[pl]);
    else
      cuda::copy_plane_async(in.data[pl], in.pitch[pl], out.data[pl], out.pitch[pl],
                             in.pw[pl] * sample_bytes(in.format), in.ph[pl], stream);
  }
}
#endif

}  // namespace vfp
