// CUDA median against the CPU reference, bit for bit: both GPU algorithms, every border,
// window shapes from 3x1 to 255x255, several percentiles, odd frame sizes.
#include <gtest/gtest.h>

#include "cpu/median.hpp"
#include "gpu_test_util.hpp"
#include "test_util.hpp"
#if VFPIPE_HAVE_CUDA
#include "core/gpu.hpp"
#include "cuda/median.hpp"
#endif

using namespace vfp;

#if VFPIPE_HAVE_CUDA
namespace {

struct Plane {
  int w, h;
  std::vector<uint8_t> px;
};

Plane make_plane(int w, int h, uint32_t seed, int kind) {
  Plane p{w, h, std::vector<uint8_t>(static_cast<size_t>(w) * h)};
  std::mt19937 rng(seed);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t v;
      switch (kind) {
        case 0:
          v = static_cast<uint8_t>(rng());
          break;  // random
        case 1:
          v = static_cast<uint8_t>((x * 3 + y * 5) & 255);
          break;  // ramps
        case 2:
          v = ((x / 5 + y / 3) & 1) ? 255 : 0;
          break;  // extremes
        default:
          v = static_cast<uint8_t>(rng() % 7 + 100);
          break;  // many ties
      }
      p.px[static_cast<size_t>(y) * w + x] = v;
    }
  return p;
}

// Runs the CUDA filter with the given algorithm; the device plane uses a padded pitch.
std::vector<uint8_t> run_gpu(const Plane& in, const MedianParams& p, cuda::MedianAlgo algo) {
  cuda::Stream s;
  test::DevPlane src(in.w, in.h), dst(in.w, in.h);
  src.upload(in.px, s.get());
  cuda::memset_async(dst.buf.get(), 0xCD, dst.buf.size(), s.get());
  cuda::median_plane_async(src.buf.get(), src.pitch, dst.buf.get(), dst.pitch, in.w, in.h, p, algo, s.get());
  return dst.download(s.get());
}

std::vector<uint8_t> run_cpu(const Plane& in, const MedianParams& p) {
  std::vector<uint8_t> out(in.px.size());
  median_plane_cpu(in.px.data(), in.w, out.data(), in.w, in.w, in.h, p);
  return out;
}

}  // namespace

TEST(GpuMedian, SelectionEqualsCpuForSmallWindows) {
  REQUIRE_GPU();
  const std::pair<int, int> sizes[] = {{1, 1}, {3, 7}, {2, 2}, {33, 17}, {1921, 1081}};
  std::vector<std::pair<int, int>> shapes;
  for (int rx = 1; rx <= 3; ++rx)
    for (int ry = 1; ry <= 3; ++ry) shapes.push_back({rx, ry});
  shapes.push_back({4, 4});
  for (auto [w, h] : sizes)
    for (auto [rx, ry] : shapes)
      for (Border b : {Border::Replicate, Border::Reflect101, Border::Reflect, Border::Constant})
        for (int kind = 0; kind < 4; ++kind) {
          if (w * h > 100000 && (kind != 0 || b == Border::Reflect)) continue;  // keep it quick
          MedianParams p;
          p.radius = rx;
          p.radiusV = ry;
          p.border = b;
          p.value = 200;
          Plane in = make_plane(w, h, static_cast<uint32_t>(w + rx * 10 + ry), kind);
          ASSERT_EQ(run_gpu(in, p, cuda::MedianAlgo::Select), run_cpu(in, p))
              << w << "x" << h << " " << 2 * rx + 1 << "x" << 2 * ry + 1 << " " << border_name(b) << " kind " << kind;
        }
}

TEST(GpuMedian, HistogramEqualsCpuForAnyWindowAndPercentile) {
  REQUIRE_GPU();
  const std::pair<int, int> sizes[] = {{1, 1}, {3, 7}, {67, 45}, {300, 131}};
  const std::pair<int, int> radii[] = {{1, 1},   {2, 2},  {4, 4},  {7, 7},    {10, 10},
                                       {25, 25}, {3, 12}, {40, 2}, {127, 127}};
  for (auto [w, h] : sizes)
    for (auto [rx, ry] : radii)
      for (Border b : {Border::Replicate, Border::Reflect101, Border::Reflect, Border::Constant})
        for (double pc : {0.5, 0.0, 0.1, 0.75, 1.0}) {
          MedianParams p;
          p.radius = rx;
          p.radiusV = ry;
          p.border = b;
          p.percentile = pc;
          p.value = 33;
          Plane in = make_plane(w, h, static_cast<uint32_t>(w * 7 + rx), (rx + w) % 4);
          ASSERT_EQ(run_gpu(in, p, cuda::MedianAlgo::Histogram), run_cpu(in, p))
              << w << "x" << h << " r=" << rx << "," << ry << " " << border_name(b) << " p=" << pc;
        }
}

TEST(GpuMedian, AutoOnFullHdOddSize) {
  REQUIRE_GPU();
  Plane in = make_plane(1921, 1081, 5, 0);
  for (int r : {1, 2, 3, 4, 7, 10}) {
    MedianParams p;
    p.radius = r;
    ASSERT_EQ(run_gpu(in, p, cuda::MedianAlgo::Auto), run_cpu(in, p)) << "radius " << r;
  }
}
#else
TEST(GpuMedian, NotBuilt) { GTEST_SKIP() << "built without CUDA"; }
#endif
