#include "stages/convert.hpp"

#include <cstring>

#include "pipeline/error.hpp"
#include "stages/convert_ops.hpp"

namespace vfp {

namespace {
template <int SF, int DF>
void run(const ImageView& s, const ImageView& d) {
  const int bw = (s.width + 1) / 2, bh = (s.height + 1) / 2;
  for (int by = 0; by < bh; ++by)
    for (int bx = 0; bx < bw; ++bx) conv::convert_block<SF, DF>(s, d, bx, by);
}
template <int SF>
void run_to(const ImageView& s, const ImageView& d) {
  switch (static_cast<int>(d.format)) {
    case conv::kGray: return run<SF, conv::kGray>(s, d);
    case conv::k420: return run<SF, conv::k420>(s, d);
    case conv::k444: return run<SF, conv::k444>(s, d);
    case conv::kBGR: return run<SF, conv::kBGR>(s, d);
    case conv::kRGB: return run<SF, conv::kRGB>(s, d);
  }
  throw Error(ErrorKind::Internal, "convert_cpu: bad destination format");
}
}  // namespace

void convert_cpu(const ImageView& s, const ImageView& d) {
  if (s.width != d.width || s.height != d.height)
    throw Error(ErrorKind::Internal, "convert_cpu: size mismatch");
  switch (static_cast<int>(s.format)) {
    case conv::kGray: return run_to<conv::kGray>(s, d);
    case conv::k420: return run_to<conv::k420>(s, d);
    case conv::k444: return run_to<conv::k444>(s, d);
    case conv::kBGR: return run_to<conv::kBGR>(s, d);
    case conv::kRGB: return run_to<conv::kRGB>(s, d);
  }
  throw Error(ErrorKind::Internal, "convert_cpu: bad source format");
}

void copy_image_cpu(const ImageView& s, const ImageView& d) {
  const int bpp = is_packed_rgb(s.format) ? 3 : 1;
  for (int p = 0; p < plane_count(s.format); ++p)
    for (int y = 0; y < s.ph[p]; ++y)
      std::memcpy(d.row(p, y), s.row(p, y), static_cast<size_t>(s.pw[p]) * bpp);
}

}  // namespace vfp
