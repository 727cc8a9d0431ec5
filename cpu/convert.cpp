#include "cpu/convert.hpp"

#include <cstring>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "cpu/convert_ops.hpp"

namespace vfp {

namespace {
template <int SF, int DF>
void run(const ImageView& s, const ImageView& d, const conv::YuvMatrix& m) {
  // 2x2 blocks are independent: rows of blocks in stripes on the CPU pool.
  const int bw = (s.width + 1) / 2, bh = (s.height + 1) / 2;
  parallel_rows(bh, 8, [&](int b0, int b1) {
    for (int by = b0; by < b1; ++by)
      for (int bx = 0; bx < bw; ++bx) conv::convert_block<SF, DF>(s, d, bx, by, m);
  });
}
}  // namespace

void convert_cpu(const ImageView& s, const ImageView& d, const ColorDesc& color) {
  if (s.width != d.width || s.height != d.height) throw Error(ErrorKind::Internal, "convert_cpu: size mismatch");
  const conv::YuvMatrix m = conv::yuv_matrix(color, s.width, s.height);
  bool ok = false;
  conv::with_format(s.format, [&](auto SF) {
    ok = conv::with_format(d.format, [&](auto DF) { run<decltype(SF)::value, decltype(DF)::value>(s, d, m); });
  });
  if (!ok) throw Error(ErrorKind::Internal, "convert_cpu: bad pixel format");
}

void copy_image_cpu(const ImageView& s, const ImageView& d) {
  const int bpp = sample_bytes(s.format);
  for (int p = 0; p < plane_count(s.format); ++p)
    for (int y = 0; y < s.ph[p]; ++y) std::memcpy(d.row(p, y), s.row(p, y), static_cast<size_t>(s.pw[p]) * bpp);
}

void split_semi_planar_cpu(const SemiPlanar& src, const ImageView& dst) {
  const bool deep = src.bits > 8;
  for (int y = 0; y < dst.ph[0]; ++y) {
    const uint8_t* s = src.luma + static_cast<ptrdiff_t>(y) * src.luma_pitch;
    if (!deep) {
      std::memcpy(dst.row(0, y), s, static_cast<size_t>(dst.pw[0]));
    } else {
      for (int x = 0; x < dst.pw[0]; ++x) dst.row16(0, y)[x] = conv::semi_planar_sample(s, x, src.bits);
    }
  }
  for (int y = 0; y < dst.ph[1]; ++y) {
    const uint8_t* s = src.chroma + static_cast<ptrdiff_t>(y) * src.chroma_pitch;
    for (int x = 0; x < dst.pw[1]; ++x) {
      const uint16_t u = conv::semi_planar_sample(s, 2 * x, src.bits),
                     v = conv::semi_planar_sample(s, 2 * x + 1, src.bits);
      if (deep) {
        dst.row16(1, y)[x] = u;
        dst.row16(2, y)[x] = v;
      } else {
        dst.row(1, y)[x] = static_cast<uint8_t>(u);
        dst.row(2, y)[x] = static_cast<uint8_t>(v);
      }
    }
  }
}

}  // namespace vfp
