// Convolution, CPU side: kernels and presets, the 2-D definition against an independent
// double-precision sum and OpenCV's filter2D, the separable path's bound, errors, and a
// live kernel change through the engine.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "core/error.hpp"
#include "core/filter_parser.hpp"
#include "pipeline/engine.hpp"
#include "stages/conv.hpp"
#include "test_util.hpp"
#if VFPIPE_HAVE_OPENCV
#include <opencv2/imgproc.hpp>
#endif

using namespace vfp;
using namespace vfp::test;

namespace {
std::vector<uint8_t> rand_plane(int w, int h, uint32_t seed) {
  std::vector<uint8_t> v(static_cast<size_t>(w) * h);
  std::mt19937 rng(seed);
  for (auto& x : v) x = static_cast<uint8_t>(rng());
  return v;
}

ConvParams params_for(const std::string& filter) {
  auto f = parse_filter_string(filter);
  Options o = bind_options(conv_options(), f.at(0), filter, "conv");
  bool sep = false;
  return conv_params_from_options(o, &sep);
}

// Independent check: double precision, modulo arithmetic for the borders.
int reference_pixel(const std::vector<uint8_t>& s, int w, int h, int x, int y, const ConvParams& p) {
  const ConvKernel& k = p.kernel;
  double acc = 0;
  for (int ky = 0; ky < k.h; ++ky)
    for (int kx = 0; kx < k.w; ++kx) {
      int sx = x + kx - k.w / 2, sy = y + ky - k.h / 2;
      int gx = border_index(sx, w, p.border), gy = border_index(sy, h, p.border);
      double v = (gx < 0 || gy < 0) ? p.value : s[static_cast<size_t>(gy) * w + gx];
      acc += static_cast<double>(k.taps[static_cast<size_t>(ky) * k.w + kx]) * v;
    }
  double r = std::floor(acc * p.rdiv + p.bias + 0.5);
  return static_cast<int>(std::min(255.0, std::max(0.0, r)));
}
}  // namespace

TEST(Conv, PresetsHaveTheExpectedShape) {
  ConvKernel g = conv_preset("gauss", 7, 7, 1.5, 1, "x");
  EXPECT_TRUE(g.separable);
  EXPECT_NEAR(g.sum(), 1.0, 1e-5);
  EXPECT_EQ(g.taps.size(), 49u);
  ConvKernel sob = conv_preset("sobel", 0, 0, 0, 1, "x");
  EXPECT_TRUE(sob.separable);
  EXPECT_FLOAT_EQ(sob.taps[0], -1);
  EXPECT_FLOAT_EQ(sob.taps[5], 2);
  EXPECT_NEAR(sob.sum(), 0, 1e-9);
  ConvKernel soby = conv_preset("sobel", 0, 0, 0, 1, "y");
  EXPECT_FLOAT_EQ(soby.taps[1], -2);
  EXPECT_FALSE(conv_preset("sharpen", 0, 0, 0, 1, "x").separable);
  EXPECT_NEAR(conv_preset("unsharp", 5, 5, 0, 1.5, "x").sum(), 1.0, 1e-5);
  EXPECT_TRUE(conv_preset("box", 31, 9, 0, 1, "x").separable);
  EXPECT_NEAR(conv_preset("emboss", 0, 0, 0, 1, "x").sum(), 1.0, 1e-9);
  // Inline taps: a rank-1 kernel is detected as separable.
  ConvKernel in = conv_parse_taps("1 2 1 2 4 2 1 2 1", 0, 0);
  EXPECT_EQ(in.w, 3);
  EXPECT_TRUE(in.separable);
  EXPECT_FALSE(conv_parse_taps("1 2 1 2 5 2 1 2 1", 0, 0).separable);
  ConvKernel rect = conv_parse_taps("1,2,3,4,5", 5, 1);
  EXPECT_EQ(rect.w, 5);
  EXPECT_EQ(rect.h, 1);
  EXPECT_FLOAT_EQ(params_for("conv=box:size=3").rdiv, 1.f / 9);
  EXPECT_FLOAT_EQ(params_for("conv=sobel").rdiv, 1.f);
}

TEST(Conv, DefinitionMatchesDoublePrecisionWithinOneLevel) {
  for (const char* f : {"conv=gauss:size=7", "conv=sharpen:amount=2", "conv=sobel:bias=128",
                        "conv=kernel=0.1 0.2 0.3 0.4 0.5 0.6 0.7 0.8 0.9:rdiv=0.5", "conv=box:size=31x3",
                        "conv=unsharp:size=9:amount=3"})
    for (const char* b : {"reflect101", "replicate", "reflect", "constant", "wrap"}) {
      ConvParams p = params_for(std::string(f) + ":border=" + b + ":value=99");
      for (auto [w, h] : {std::pair{1, 1}, {3, 7}, {40, 23}}) {
        auto src = rand_plane(w, h, static_cast<uint32_t>(w + h));
        std::vector<uint8_t> out(src.size());
        conv_plane_cpu(src.data(), w, out.data(), w, w, h, p);
        for (int y = 0; y < h; ++y)
          for (int x = 0; x < w; ++x)
            ASSERT_LE(std::abs(out[static_cast<size_t>(y) * w + x] - reference_pixel(src, w, h, x, y, p)), 1)
                << f << " " << b << " " << w << "x" << h << " at " << x << "," << y;
      }
    }
}

TEST(Conv, IntegerKernelsAreExact) {
  // Integer taps and 8-bit samples: every partial sum is exact in float, so the only
  // rounding is the final one and the result equals the exact rational one.
  ConvParams p = params_for("conv=kernel=1 2 1 2 4 2 1 2 1:border=replicate");
  auto src = rand_plane(37, 19, 3);
  std::vector<uint8_t> out(src.size());
  conv_plane_cpu(src.data(), 37, out.data(), 37, 37, 19, p);
  for (int y = 0; y < 19; ++y)
    for (int x = 0; x < 37; ++x) {
      int sum = 0;
      const int k[3] = {1, 2, 1};
      for (int dy = -1; dy <= 1; ++dy)
        for (int dx = -1; dx <= 1; ++dx)
          sum += k[dy + 1] * k[dx + 1] *
                 src[static_cast<size_t>(std::clamp(y + dy, 0, 18)) * 37 + std::clamp(x + dx, 0, 36)];
      EXPECT_EQ(out[static_cast<size_t>(y) * 37 + x], (sum + 8) / 16) << x << "," << y;  // half up
    }
}

TEST(Conv, SeparablePathWithinOneLevelOfTheDefinition) {
  for (const char* f :
       {"conv=gauss:size=9", "conv=gauss:size=31:sigma=6", "conv=box:size=15x5", "conv=sobel:dir=y:bias=128",
        "conv=kernel=1 4 6 4 1 4 16 24 16 4 6 24 36 24 6 4 16 24 16 4 1 4 6 4 1"})
    for (const char* b : {"reflect101", "replicate", "constant", "wrap"}) {
      ConvParams p = params_for(std::string(f) + ":border=" + b);
      ASSERT_TRUE(p.kernel.separable) << f;
      auto src = rand_plane(61, 33, 9);
      std::vector<uint8_t> a(src.size()), c(src.size());
      conv_plane_cpu(src.data(), 61, a.data(), 61, 61, 33, p);
      conv_plane_separable_cpu(src.data(), 61, c.data(), 61, 61, 33, p);
      int worst = 0;
      for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - c[i]));
      EXPECT_LE(worst, 1) << f << " " << b;
    }
}

// 16-bit samples: the same definition at 16 bits (bias and value x 257, clamped to
// 0..65535): against the double-precision sum within one 16-bit level, and a 16-bit frame
// holding an 8-bit one (x 257) filters to within one 8-bit level of the 8-bit result x 257.
TEST(Conv, SixteenBitSamples) {
  for (const char* f : {"conv=gauss:size=7", "conv=sharpen:amount=2", "conv=sobel:bias=128",
                        "conv=kernel=0.1 0.2 0.3 0.4 0.5 0.6 0.7 0.8 0.9:rdiv=0.5", "conv=gauss:size=15:sigma=3"})
    for (const char* b : {"reflect101", "constant", "wrap"}) {
      const ConvParams p8 = params_for(std::string(f) + ":border=" + b + ":value=99");
      const ConvParams p16 = p8.at_16_bits();
      const int w = 41, h = 23;
      const auto src8 = rand_plane(w, h, 5);
      std::vector<uint16_t> src(src8.size()), out(src8.size()), sep(src8.size());
      std::mt19937 rng(7);
      for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint16_t>(rng());
      conv_plane_cpu(src.data(), 2 * w, out.data(), 2 * w, w, h, p16);
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) {
          const ConvKernel& k = p16.kernel;
          double acc = 0;
          for (int ky = 0; ky < k.h; ++ky)
            for (int kx = 0; kx < k.w; ++kx) {
              const int gx = border_index(x + kx - k.w / 2, w, p16.border);
              const int gy = border_index(y + ky - k.h / 2, h, p16.border);
              acc += static_cast<double>(k.taps[static_cast<size_t>(ky) * k.w + kx]) *
                     ((gx < 0 || gy < 0) ? p16.value : src[static_cast<size_t>(gy) * w + gx]);
            }
          const double want = std::clamp(std::floor(acc * p16.rdiv + p16.bias + 0.5), 0.0, 65535.0);
          // Float partial sums of 16-bit samples: a relative error near 2^-24 of the sum.
          ASSERT_LE(std::abs(out[static_cast<size_t>(y) * w + x] - want), 1 + std::abs(acc) * 1e-6)
              << f << " " << b << " at " << x << "," << y;
        }
      if (p16.kernel.separable) {
        conv_plane_separable_cpu(src.data(), 2 * w, sep.data(), 2 * w, w, h, p16);
        for (size_t i = 0; i < out.size(); ++i) ASSERT_LE(std::abs(out[i] - sep[i]), 2) << f << " separable";
      }
      // An 8-bit plane at 16 bits.
      std::vector<uint8_t> out8(src8.size());
      for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint16_t>(src8[i] * 257);
      conv_plane_cpu(src8.data(), w, out8.data(), w, w, h, p8);
      conv_plane_cpu(src.data(), 2 * w, out.data(), 2 * w, w, h, p16);
      for (size_t i = 0; i < out.size(); ++i) ASSERT_LE(std::abs(out[i] - out8[i] * 257), 257) << f << " " << b;
    }
}

TEST(Conv, MatchesOpenCvFilter2DWithinOneLevel) {
#if VFPIPE_HAVE_OPENCV
  const std::pair<const char*, int> borders[] = {{"reflect101", cv::BORDER_REFLECT_101},
                                                 {"replicate", cv::BORDER_REPLICATE},
                                                 {"reflect", cv::BORDER_REFLECT},
                                                 {"constant", cv::BORDER_CONSTANT}};
  for (const char* f : {"conv=gauss:size=5", "conv=sharpen", "conv=kernel=0.5 -1 2 0.25 1 -0.75 1 0 0.5 3 1 -1 0.5 2 1",
                        "conv=laplacian:bias=128", "conv=box:size=11x3", "conv=emboss"})
    for (auto [bname, bcv] : borders)
      for (int channels : {1, 3}) {
        std::string filter = std::string(f) + ":border=" + bname;
        if (std::string(f).find("kernel=0.5") != std::string::npos) filter += ":size=5x3";
        ConvParams p = params_for(filter);
        const int w = 53, h = 29;
        std::vector<std::vector<uint8_t>> planes;
        std::vector<cv::Mat> mats;
        for (int c = 0; c < channels; ++c) {
          planes.push_back(rand_plane(w, h, static_cast<uint32_t>(c + 5)));
          mats.push_back(cv::Mat(h, w, CV_8UC1, planes.back().data()).clone());
        }
        cv::Mat img, out;
        cv::merge(mats, img);
        cv::Mat kern(p.kernel.h, p.kernel.w, CV_32F);
        for (int i = 0; i < p.kernel.h * p.kernel.w; ++i)
          kern.at<float>(i / p.kernel.w, i % p.kernel.w) = p.kernel.taps[static_cast<size_t>(i)] * p.rdiv;
        cv::filter2D(img, out, CV_8U, kern, cv::Point(-1, -1), p.bias, bcv);
        std::vector<cv::Mat> outs;
        cv::split(out, outs);
        for (int c = 0; c < channels; ++c) {
          std::vector<uint8_t> ours(planes[static_cast<size_t>(c)].size());
          conv_plane_cpu(planes[static_cast<size_t>(c)].data(), w, ours.data(), w, w, h, p);
          int worst = 0;
          for (int y = 0; y < h; ++y)
            for (int x = 0; x < w; ++x)
              worst = std::max(worst, std::abs(ours[static_cast<size_t>(y) * w + x] -
                                               outs[static_cast<size_t>(c)].at<uint8_t>(y, x)));
          EXPECT_LE(worst, 1) << filter << " channels " << channels;
        }
      }
#else
  GTEST_SKIP() << "built without OpenCV";
#endif
}

TEST(Conv, BadKernelsGiveErrorsAtTheValue) {
  auto err = [](const std::string& f) -> std::pair<size_t, std::string> {
    try {
      build_stages(f);
    } catch (const ParseError& e) {
      return {e.pos(), e.what()};
    }
    return {std::string::npos, ""};
  };
  EXPECT_EQ(err("conv=kernel=1 2 x 4").first, 12u);
  EXPECT_NE(err("conv=kernel=1 2 x 4").second.find("tap 3 ('x') is not a number"), std::string::npos);
  EXPECT_NE(err("conv=kernel=1 2 3 4").second.find("must be odd"), std::string::npos);
  EXPECT_NE(err("conv=kernel=1 2 3 4 5 6").second.find("do not make a square"), std::string::npos);
  EXPECT_NE(err("conv=kernel=1 -1 0 0 0 0 0 0 0").second.find("sum to 0"), std::string::npos);
  EXPECT_EQ(err("conv=kernel=1 -1 0 0 0 0 0 0 0:rdiv=1").first, std::string::npos);
  EXPECT_EQ(err("conv=gauss:size=4").first, 16u);
  EXPECT_NE(err("conv=box:size=33").second.find("exceeds the maximum 31x31"), std::string::npos);
  EXPECT_NE(err("conv=blur").second.find("unknown kernel preset 'blur'"), std::string::npos);
  EXPECT_NE(err("conv=sobel:size=5").second.find("3x3 only"), std::string::npos);
  EXPECT_NE(err("conv=file=/no/such/kernel.txt").second.find("cannot open kernel file"), std::string::npos);
  EXPECT_NE(err("conv=sharpen:separable=on").second.find("not rank 1"), std::string::npos);
  std::string path = tmp_path("kernel.txt");
  std::ofstream(path) << "# a 3x3 kernel\n1 2 1\n2 four 2\n1 2 1\n";
  EXPECT_NE(err("conv=file=" + path).second.find(":3: 'four' is not a number"), std::string::npos);
  std::ofstream(path) << "1 2 1\n2 4 2\n1 2 1  # binomial\n";
  EXPECT_EQ(err("conv=file=" + path).first, std::string::npos);
  std::remove(path.c_str());
  // Bounded reads and finite taps: a device or a huge file is refused after 64 KiB (it was
  // read whole: /dev/zero grew past 6 GB), taps beyond 1e9 overflow the float sums.
  EXPECT_NE(err("conv=file=/dev/zero").second.find("larger than 64 KiB"), std::string::npos);
  EXPECT_NE(err("conv=file=" + ::testing::TempDir()).second.find("is a directory"), std::string::npos);
  EXPECT_NE(err("conv=kernel=1e308 0 0 0 0 0 0 0 0").second.find("within +-1e9"), std::string::npos);
  EXPECT_NE(err("conv=kernel=1 2 1 2 4 2 1 2 1e10").second.find("tap 9"), std::string::npos);
}

TEST(Conv, LiveKernelChangeAppliesFromTheNextFrame) {
  FrameSpec spec{PixelFormat::GRAY8, 48, 32, {25, 1}};
  TestSource src(spec, 12);
  CaptureSink sink;
  Chain chain = Chain::build(build_stages("conv=identity"), spec, {});
  sink.open(chain.output());
  const std::string later = "conv=box:size=5";
  EngineConfig cfg;
  cfg.before_frame = [&](int64_t i, Chain& c) {
    if (i == 6) {
      auto f = parse_filter_string(later);
      c.step(0).stage->update(bind_options(conv_options(), f[0], later, "conv"));
    }
  };
  RunResult r = run_pipeline(src, chain, sink, cfg);
  ASSERT_FALSE(r.error);
  TestSource again(spec, 12);
  ConvParams box = params_for(later);
  for (int i = 0; i < 12; ++i) {
    HostFrame in(spec, false), want(spec, false);
    ASSERT_TRUE(again.read(in));
    if (i < 6) {
      EXPECT_TRUE(sink.frames[static_cast<size_t>(i)]->same_pixels(in)) << i;
    } else {
      conv_plane_cpu(in.data(), in.view().pitch[0], want.data(), want.view().pitch[0], 48, 32, box);
      EXPECT_TRUE(sink.frames[static_cast<size_t>(i)]->same_pixels(want)) << i;
    }
  }
}
