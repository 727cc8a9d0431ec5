// CUDA convolution against the CPU reference, bit for bit (2-D and separable paths), and
// live kernel changes with frames in flight.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/error.hpp"
#include "core/filter_parser.hpp"
#include "gpu_test_util.hpp"
#include "pipeline/engine.hpp"
#include "stages/conv.hpp"
#include "test_util.hpp"
#if VFPIPE_HAVE_CUDA
#include "core/gpu.hpp"
#include "cuda/conv.hpp"
#endif

using namespace vfp;
using namespace vfp::test;

#if VFPIPE_HAVE_CUDA
namespace {

ConvKernel random_kernel(int w, int h, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 2.f);
  std::string taps;
  for (int i = 0; i < w * h; ++i) taps += std::to_string(d(rng)) + " ";
  return conv_parse_taps(taps, w, h);
}

std::vector<uint8_t> gpu_conv(const std::vector<uint8_t>& in, int w, int h, const ConvParams& p, bool sep) {
  cuda::Stream s;
  DevPlane src(w, h), dst(w, h);
  src.upload(in, s.get());
  cuda::memset_async(dst.buf.get(), 0xEE, dst.buf.size(), s.get());
  cuda::conv_plane_async(src.buf.get(), src.pitch, dst.buf.get(), dst.pitch, w, h, p, sep, s.get());
  return dst.download(s.get());
}

std::vector<uint8_t> plane(int w, int h, uint32_t seed) {
  std::vector<uint8_t> v(static_cast<size_t>(w) * h);
  std::mt19937 rng(seed);
  for (auto& x : v) x = static_cast<uint8_t>(rng());
  return v;
}

}  // namespace

TEST(GpuConv, TwoDimensionalEqualsCpu) {
  REQUIRE_GPU();
  const std::pair<int, int> shapes[] = {{1, 1},   {3, 3},   {5, 5},  {7, 7},  {9, 3},  {3, 9},
                                        {15, 15}, {31, 31}, {31, 1}, {1, 31}, {13, 27}};
  const std::pair<int, int> sizes[] = {{1, 1}, {3, 7}, {67, 45}, {300, 131}};
  for (auto [kw, kh] : shapes)
    for (auto [w, h] : sizes)
      for (Border b : {Border::Reflect101, Border::Replicate, Border::Reflect, Border::Constant, Border::Wrap}) {
        ConvParams p;
        p.kernel = random_kernel(kw, kh, static_cast<uint32_t>(kw * 100 + kh));
        p.rdiv = 0.37f;
        p.bias = 11.5f;
        p.border = b;
        p.value = 201;
        auto in = plane(w, h, static_cast<uint32_t>(w * 3 + kw));
        std::vector<uint8_t> want(in.size());
        conv_plane_cpu(in.data(), w, want.data(), w, w, h, p);
        ASSERT_EQ(gpu_conv(in, w, h, p, false), want)
            << kw << "x" << kh << " on " << w << "x" << h << " " << border_name(b);
      }
}

TEST(GpuConv, UnalignedAndOddPitchedRows) {
  REQUIRE_GPU();
  // The tile loader's fast path reads 4-byte words and the store writes them: misaligned
  // bases and odd pitches must take the byte paths and still match.
  for (int k : {3, 5})
    for (int offset : {1, 2})
      for (int extra : {0, 1}) {
        const int w = 400, h = 67, pitch = 512 + extra;
        ConvParams p;
        p.kernel = random_kernel(k, k, static_cast<uint32_t>(k + offset));
        p.rdiv = 0.21f;
        auto in = plane(w, h, static_cast<uint32_t>(offset * 7 + extra));
        std::vector<uint8_t> want(in.size());
        conv_plane_cpu(in.data(), w, want.data(), w, w, h, p);
        cuda::Stream s;
        cuda::DeviceBuffer din(static_cast<size_t>(pitch) * h + 8), dout(static_cast<size_t>(pitch) * h + 8);
        for (int y = 0; y < h; ++y)
          cuda::memcpy_h2d_async(din.get() + offset + static_cast<size_t>(y) * pitch,
                                 in.data() + static_cast<size_t>(y) * w, static_cast<size_t>(w), s.get());
        cuda::conv_plane_async(din.get() + offset, pitch, dout.get() + offset, pitch, w, h, p, false, s.get());
        std::vector<uint8_t> host(dout.size()), got(in.size());
        cuda::memcpy_d2h_async(host.data(), dout.get(), host.size(), s.get());
        s.synchronize();
        for (int y = 0; y < h; ++y)
          std::copy(host.begin() + offset + static_cast<long>(y) * pitch,
                    host.begin() + offset + static_cast<long>(y) * pitch + w, got.begin() + static_cast<long>(y) * w);
        ASSERT_EQ(got, want) << k << "x" << k << " offset " << offset << " pitch " << pitch;
      }
}

TEST(GpuConv, SeparableEqualsCpuSeparable) {
  REQUIRE_GPU();
  for (int kw : {1, 3, 7, 15, 31})
    for (int kh : {1, 5, 31})
      for (auto [w, h] : {std::pair{1, 1}, {3, 7}, {129, 40}, {1921, 1081}})
        for (Border b : {Border::Reflect101, Border::Constant, Border::Wrap}) {
          if (w > 1000 && (kw != 7 || kh != 5)) continue;  // one full-HD case is enough
          ConvParams p;
          p.kernel = conv_preset("gauss", kw, kh, 0, 1, "x");
          p.rdiv = 1.f / static_cast<float>(p.kernel.sum());
          p.border = b;
          p.value = 17;
          auto in = plane(w, h, static_cast<uint32_t>(kw + kh));
          std::vector<uint8_t> want(in.size()), def(in.size());
          conv_plane_separable_cpu(in.data(), w, want.data(), w, w, h, p);
          ASSERT_EQ(gpu_conv(in, w, h, p, true), want) << kw << "x" << kh << " on " << w << "x" << h;
          conv_plane_cpu(in.data(), w, def.data(), w, w, h, p);
          for (size_t i = 0; i < def.size(); ++i) ASSERT_LE(std::abs(def[i] - want[i]), 1);
        }
}

// 16-bit planes: both paths against the CPU's 16-bit reference, bit for bit.
TEST(GpuConv, SixteenBitEqualsCpu) {
  REQUIRE_GPU();
  const std::pair<int, int> shapes[] = {{1, 1}, {3, 3}, {5, 5}, {9, 3}, {31, 31}, {13, 27}};
  for (auto [kw, kh] : shapes)
    for (auto [w, h] : {std::pair{1, 1}, {3, 7}, {67, 45}, {1921, 1081}})
      for (Border b : {Border::Reflect101, Border::Replicate, Border::Reflect, Border::Constant, Border::Wrap})
        for (bool sep : {false, true}) {
          if (w > 1000 && (b != Border::Reflect101 || kw > 9)) continue;  // keep it quick
          ConvParams p;
          p.kernel = sep ? conv_preset("gauss", kw, kh, 0, 1, "x") : random_kernel(kw, kh, static_cast<uint32_t>(kw));
          p.rdiv = sep ? 1.f / static_cast<float>(p.kernel.sum()) : 0.37f;
          p.bias = 11.5f;
          p.border = b;
          p.value = 201;
          std::vector<uint16_t> in(static_cast<size_t>(w) * h), want(in.size()), got(in.size());
          std::mt19937 rng(static_cast<uint32_t>(w + kw));
          for (auto& v : in) v = static_cast<uint16_t>(rng());
          const ConvParams p16 = p.at_16_bits();
          if (sep)
            conv_plane_separable_cpu(in.data(), 2 * w, want.data(), 2 * w, w, h, p16);
          else
            conv_plane_cpu(in.data(), 2 * w, want.data(), 2 * w, w, h, p16);
          cuda::Stream s;
          DevPlane src(2 * w, h), dst(2 * w, h);  // planes of 2w bytes
          std::vector<uint8_t> bytes(in.size() * 2);
          std::memcpy(bytes.data(), in.data(), bytes.size());
          src.upload(bytes, s.get());
          cuda::conv_plane_async(reinterpret_cast<const uint16_t*>(src.buf.get()), src.pitch,
                                 reinterpret_cast<uint16_t*>(dst.buf.get()), dst.pitch, w, h, p, sep, s.get());
          const std::vector<uint8_t> out = dst.download(s.get());
          std::memcpy(got.data(), out.data(), out.size());
          ASSERT_EQ(got, want) << kw << "x" << kh << " on " << w << "x" << h << " " << border_name(b)
                               << (sep ? " separable" : "");
        }
}

TEST(GpuConv, FullHdOddSizeEveryPathThroughTheStage) {
  REQUIRE_GPU();
  for (const char* f :
       {"conv=gauss:size=5", "conv=gauss:size=15", "conv=sharpen:amount=0.7", "conv=sobel:bias=128",
        "conv=box:size=31x9:border=replicate", "conv=unsharp:size=9:planes=1", "format=yuv420p16le,conv=gauss:size=5",
        "format=yuv444p16le,conv=gauss:size=15", "format=gray16le,conv=sobel:bias=128:border=constant:value=7"}) {
    FrameSpec spec{PixelFormat::YUV420P, 1921, 1081, {25, 1}};
    CaptureSink cpu, gpu;
    for (auto [b, sink] : {std::pair{Backend::CPU, &cpu}, {Backend::CUDA, &gpu}}) {
      TestSource src(spec, 2);
      Chain chain = Chain::build(build_stages(f), spec, {});
      sink->open(chain.output());
      EngineConfig cfg;
      cfg.backend = b;
      RunResult r = run_pipeline(src, chain, *sink, cfg);
      ASSERT_FALSE(r.error) << f;
    }
    for (int i = 0; i < 2; ++i)
      ASSERT_TRUE(gpu.frames[static_cast<size_t>(i)]->same_pixels(*cpu.frames[static_cast<size_t>(i)])) << f;
  }
}

TEST(GpuConv, LiveChangesReachExactlyTheLaterFrames) {
  REQUIRE_GPU();
  // A different kernel for almost every frame, with 3 and 8 frames in flight: each output
  // must use the kernel that was current when its frame was submitted.
  const char* kernels[] = {"conv=identity",         "conv=box:size=5",     "conv=gauss:size=31:sigma=8",
                           "conv=sharpen:amount=3", "conv=sobel:bias=128", "conv=box:size=3x31"};
  FrameSpec spec{PixelFormat::GRAY8, 640, 360, {25, 1}};
  for (int depth : {3, 8}) {
    TestSource src(spec, 40);
    CaptureSink sink;
    Chain chain = Chain::build(build_stages(kernels[0]), spec, {});
    sink.open(chain.output());
    EngineConfig cfg;
    cfg.backend = Backend::CUDA;
    cfg.depth = depth;
    std::vector<int> used(40);
    cfg.before_frame = [&](int64_t i, Chain& c) {
      const int k = static_cast<int>((i * 7 / 3) % 6);
      used[static_cast<size_t>(i)] = k;
      auto f = parse_filter_string(kernels[k]);
      c.step(0).stage->update(bind_options(conv_options(), f[0], kernels[k], "conv"));
    };
    RunResult r = run_pipeline(src, chain, sink, cfg);
    ASSERT_FALSE(r.error);
    TestSource again(spec, 40);
    for (int i = 0; i < 40; ++i) {
      HostFrame in(spec, false), want(spec, false);
      ASSERT_TRUE(again.read(in));
      auto f = parse_filter_string(kernels[used[static_cast<size_t>(i)]]);
      Options o = bind_options(conv_options(), f[0], kernels[used[static_cast<size_t>(i)]], "conv");
      bool sep = false;
      ConvParams p = conv_params_from_options(o, &sep);
      if (sep)
        conv_plane_separable_cpu(in.data(), in.view().pitch[0], want.data(), want.view().pitch[0], 640, 360, p);
      else
        conv_plane_cpu(in.data(), in.view().pitch[0], want.data(), want.view().pitch[0], 640, 360, p);
      ASSERT_TRUE(sink.frames[static_cast<size_t>(i)]->same_pixels(want)) << "depth " << depth << " frame " << i;
    }
  }
}

TEST(GpuConv, TooManyStagesForTheBanksIsAClearError) {
  REQUIRE_GPU();
  FrameSpec spec{PixelFormat::GRAY8, 64, 64, {25, 1}};
  TestSource src(spec, 2);
  CaptureSink sink;
  Chain chain = Chain::build(build_stages("conv=box,conv=box,conv=box"), spec, {});
  sink.open(chain.output());
  EngineConfig cfg;
  cfg.backend = Backend::CUDA;
  cfg.depth = 8;  // 3 stages x 8 slots > 16 banks
  RunResult r = run_pipeline(src, chain, sink, cfg);
  ASSERT_TRUE(r.error);
  EXPECT_NE(error_text(r.error).find("out of constant-memory banks"), std::string::npos) << error_text(r.error);
}
#else
TEST(GpuConv, NotBuilt) { GTEST_SKIP() << "built without CUDA"; }
#endif
