// CUDA median against the CPU reference, bit for bit: both GPU algorithms, every border,
// window shapes from 3x1 to 255x255, several percentiles, odd frame sizes.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/filter_parser.hpp"
#include "cpu/median.hpp"
#include "gpu_test_util.hpp"
#include "pipeline/engine.hpp"
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

// 16-bit planes: random over the whole range, 10-bit video's samples (an 8-bit pattern
// times 257 plus small noise), and ties in the upper byte that differ in the lower one.
std::vector<uint16_t> make_plane16(int w, int h, uint32_t seed, int kind) {
  const Plane p8 = make_plane(w, h, seed, kind == 1 ? 1 : 0);
  std::vector<uint16_t> v(p8.px.size());
  std::mt19937 rng(seed + 1);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint32_t r = rng();
    v[i] = static_cast<uint16_t>(kind == 0 ? r : kind == 1 ? p8.px[i] * 257 + r % 64 : 0x6400 + (r % 48) * 5);
  }
  return v;
}

std::vector<uint16_t> run_gpu16(const std::vector<uint16_t>& in, int w, int h, const MedianParams& p,
                                cuda::MedianAlgo algo) {
  cuda::Stream s;
  test::DevPlane src(2 * w, h), dst(2 * w, h);  // planes of 2w bytes
  std::vector<uint8_t> bytes(in.size() * 2);
  std::memcpy(bytes.data(), in.data(), bytes.size());
  src.upload(bytes, s.get());
  cuda::memset_async(dst.buf.get(), 0xCD, dst.buf.size(), s.get());
  cuda::median_plane_async(reinterpret_cast<const uint16_t*>(src.buf.get()), src.pitch,
                           reinterpret_cast<uint16_t*>(dst.buf.get()), dst.pitch, w, h, p, algo, s.get());
  const std::vector<uint8_t> out = dst.download(s.get());
  std::vector<uint16_t> got(in.size());
  std::memcpy(got.data(), out.data(), out.size());
  return got;
}

std::vector<uint16_t> run_cpu16(const std::vector<uint16_t>& in, int w, int h, const MedianParams& p) {
  std::vector<uint16_t> out(in.size());
  median_plane_cpu(in.data(), 2 * w, out.data(), 2 * w, w, h, p);
  return out;
}

}  // namespace

TEST(GpuMedian, SixteenBitEqualsCpu) {
  REQUIRE_GPU();
  const std::pair<int, int> sizes[] = {{1, 1}, {3, 7}, {67, 45}, {1921, 1081}};
  std::vector<std::pair<int, int>> small;
  for (int rx = 1; rx <= 3; ++rx)
    for (int ry = 1; ry <= 3; ++ry) small.push_back({rx, ry});
  small.push_back({4, 4});
  const std::pair<int, int> large[] = {{1, 1}, {2, 2}, {7, 7}, {25, 25}, {3, 12}, {40, 2}};
  for (auto [w, h] : sizes)
    for (Border b : {Border::Replicate, Border::Reflect101, Border::Reflect, Border::Constant})
      for (int kind = 0; kind < 3; ++kind) {
        const bool big = w * h > 100000;
        if (big && (kind != 1 || b == Border::Reflect)) continue;  // keep it quick
        const std::vector<uint16_t> in = make_plane16(w, h, static_cast<uint32_t>(w + kind), kind);
        MedianParams p;
        p.border = b;
        p.value = 0x6419;
        for (auto [rx, ry] : small) {
          p.radius = rx;
          p.radiusV = ry;
          ASSERT_EQ(run_gpu16(in, w, h, p, cuda::MedianAlgo::Select), run_cpu16(in, w, h, p))
              << "select " << w << "x" << h << " " << 2 * rx + 1 << "x" << 2 * ry + 1 << " " << border_name(b)
              << " kind " << kind;
        }
        for (auto [rx, ry] : large)
          for (double pc : {0.5, 0.0, 0.75, 1.0}) {
            if (big && (rx > 7 || pc != 0.5)) continue;
            p.radius = rx;
            p.radiusV = ry;
            p.percentile = pc;
            ASSERT_EQ(run_gpu16(in, w, h, p, cuda::MedianAlgo::Histogram), run_cpu16(in, w, h, p))
                << "histogram " << w << "x" << h << " r=" << rx << "," << ry << " " << border_name(b) << " p=" << pc
                << " kind " << kind;
          }
      }
}

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

// The stage on 16-bit frames through the engine: no conversion, the CPU backend's pixels.
TEST(GpuMedian, SixteenBitStageThroughTheEngine) {
  REQUIRE_GPU();
  for (PixelFormat fmt : {PixelFormat::YUV420P16, PixelFormat::GRAY16, PixelFormat::YUV444P16}) {
    const FrameSpec spec{fmt, 1921, 1081, {25, 1}};
    const std::string filters = "median=radius=2:border=constant:value=9,median=radius=6:percentile=0.3:planes=5";
    test::TestSource src_c(spec, 3), src_g(spec, 3);
    test::CaptureSink cpu, gpu;
    Chain cc = Chain::build(build_stages(filters), spec, {}), cg = Chain::build(build_stages(filters), spec, {});
    ASSERT_EQ(cg.size(), 2u);
    cpu.open(cc.output());
    gpu.open(cg.output());
    EngineConfig cfg;
    cfg.backend = Backend::CPU;
    const RunResult rc = run_pipeline(src_c, cc, cpu, cfg);
    cfg.backend = Backend::CUDA;
    cfg.depth = 3;
    const RunResult rg = run_pipeline(src_g, cg, gpu, cfg);
    ASSERT_FALSE(rc.error);
    ASSERT_FALSE(rg.error);
    ASSERT_EQ(gpu.frames.size(), 3u);
    ASSERT_EQ(cpu.frames.size(), 3u);
    for (size_t i = 0; i < 3; ++i)
      EXPECT_TRUE(gpu.frames[i]->same_pixels(*cpu.frames[i])) << pix_fmt_name(fmt) << " " << i;
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
