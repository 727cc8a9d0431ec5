// MMP intra codec core (pipeline/mmp/mmp.hpp): the decoder reproduces the encoder's
// reconstruction bit for bit on random, flat, gradient and text-like planes of odd sizes and
// several lambdas; rate and distortion move the right way with lambda; every prediction mode
// and both split directions are used; the scale transform's rounding; corrupt and truncated
// data never crash and truncation is reported.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "pipeline/error.hpp"
#include "pipeline/mmp/mmp.hpp"

#include <filesystem>

using namespace vfp;

namespace {

std::vector<uint8_t> plane(const std::string& kind, int w, int h, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(static_cast<size_t>(w) * h);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t& o = v[static_cast<size_t>(y) * w + x];
      if (kind == "random") o = static_cast<uint8_t>(rng());
      if (kind == "flat") o = 77;
      if (kind == "gradient") o = static_cast<uint8_t>(x * 3 + y * 2);
      if (kind == "text") o = ((x / 3 + y / 5) % 4 == 0 || (y % 11) == 3) ? 20 : 235;  // strokes on paper
      if (kind == "photo") o = static_cast<uint8_t>(std::clamp(128 + 60 * std::sin(x / 9.0) * std::cos(y / 7.0) + std::normal_distribution<double>(0, 4)(rng), 0.0, 255.0));
    }
  return v;
}

double psnr(double sse, size_t n) { return sse == 0 ? 99 : 10 * std::log10(255.0 * 255.0 * n / sse); }

}  // namespace

TEST(Mmp, ScaleTransformRounding) {
  // Shrinking averages with rounding half up; enlarging repeats.
  EXPECT_EQ(mmp::resize_element({1, 2, 3, 4}, 2, 0, 1, 0), (std::vector<int16_t>{2, 4}));      // 1.5 -> 2, 3.5 -> 4
  EXPECT_EQ(mmp::resize_element({-1, -2, 5, 5}, 2, 0, 1, 0), (std::vector<int16_t>{-1, 5}));   // -1.5 -> -1
  EXPECT_EQ(mmp::resize_element({7, -3}, 1, 0, 2, 0), (std::vector<int16_t>{7, 7, -3, -3}));
  EXPECT_EQ(mmp::resize_element({1, 2, 3, 4}, 1, 1, 0, 0), (std::vector<int16_t>{3}));        // 2.5 -> 3
  EXPECT_EQ(mmp::resize_element({9}, 0, 0, 1, 1), (std::vector<int16_t>{9, 9, 9, 9}));
  EXPECT_EQ(mmp::resize_element({1, 2, 3, 4}, 2, 0, 0, 2), (std::vector<int16_t>{3, 3, 3, 3}));  // 2.5 -> 3, then repeated
}

TEST(Mmp, DecoderEqualsEncoderReconstruction) {
  for (const char* kind : {"random", "flat", "gradient", "text", "photo"})
    for (auto [w, h] : {std::pair{1, 1}, {3, 7}, {37, 21}, {48, 32}})
      for (double lambda : {0.0, 20.0, 400.0}) {
        const auto img = plane(kind, w, h, static_cast<uint32_t>(w * h));
        mmp::Params p;
        p.lambda = lambda;
        const mmp::PlaneResult r = mmp::encode_plane(img.data(), w, h, p);
        const auto back = mmp::decode_plane(r.bytes.data(), r.bytes.size(), w, h, p);
        ASSERT_EQ(back, r.recon) << kind << " " << w << "x" << h << " lambda " << lambda;
      }
}

TEST(Mmp, RateAndDistortionFollowLambda) {
  const int w = 64, h = 48;
  const auto img = plane("photo", w, h, 5);
  double last_bits = 1e18, last_psnr = 1e9;
  for (double lambda : {2.0, 30.0, 300.0, 3000.0}) {
    mmp::Params p;
    p.lambda = lambda;
    const mmp::PlaneResult r = mmp::encode_plane(img.data(), w, h, p);
    const double bits = r.bytes.size() * 8.0, q = psnr(r.sse, img.size());
    EXPECT_LE(bits, last_bits * 1.02) << lambda;  // fewer bits (small slack: adaptive models)
    EXPECT_LE(q, last_psnr + 0.05) << lambda;     // lower quality
    last_bits = bits;
    last_psnr = q;
  }
  mmp::Params fine;
  fine.lambda = 2;
  EXPECT_GT(psnr(mmp::encode_plane(img.data(), w, h, fine).sse, img.size()), 35.0);
}

TEST(Mmp, EveryModeAndSplitDirectionIsUsed) {
  // A plane made of blocks that favour each predictor: flat with a bright top row (vertical),
  // with a bright left column (horizontal), smooth (DC), and noise.
  const int w = 96, h = 64;
  auto img = plane("photo", w, h, 9);
  const auto txt = plane("text", w, h, 1);
  for (int y = 0; y < 32; ++y)
    for (int x = 0; x < 48; ++x) img[static_cast<size_t>(y) * w + x] = static_cast<uint8_t>(x % 16 < 8 ? 40 : 200);
  for (int y = 32; y < 64; ++y)
    for (int x = 0; x < 48; ++x) img[static_cast<size_t>(y) * w + x] = static_cast<uint8_t>(y % 16 < 8 ? 60 : 180);
  for (int y = 0; y < 32; ++y)
    for (int x = 48; x < 96; ++x) img[static_cast<size_t>(y) * w + x] = txt[static_cast<size_t>(y) * w + x];
  mmp::Params p;
  p.lambda = 10;
  const mmp::PlaneResult r = mmp::encode_plane(img.data(), w, h, p);
  for (int m = 0; m < 4; ++m) EXPECT_GT(r.modes[m], 0) << "mode " << m << " never chosen";
  EXPECT_GT(r.splits[0], 0);
  EXPECT_GT(r.splits[1], 0);
  EXPECT_GT(r.dict_elements, 25 * 64);  // the dictionaries learned
  EXPECT_EQ(mmp::decode_plane(r.bytes.data(), r.bytes.size(), w, h, p), r.recon);
}

TEST(Mmp, CorruptOrTruncatedDataIsRejectedWithoutCrashing) {
  const int w = 48, h = 32;
  const auto img = plane("photo", w, h, 3);
  mmp::Params p;
  const mmp::PlaneResult r = mmp::encode_plane(img.data(), w, h, p);
  std::mt19937 rng(1);
  int rejected = 0;
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<uint8_t> bad = r.bytes;
    if (trial % 2) bad.resize(rng() % bad.size());
    else
      for (int k = 0; k < 3; ++k) bad[1 + rng() % (bad.size() - 1)] ^= static_cast<uint8_t>(1 + rng() % 255);
    try {
      const auto out = mmp::decode_plane(bad.data(), bad.size(), w, h, p);
      EXPECT_EQ(out.size(), img.size());
    } catch (const Error& e) {
      ++rejected;
      EXPECT_NE(std::string(e.what()).find("MMP"), std::string::npos);
    }
    if (trial % 2 && bad.size() + 8 < r.bytes.size()) EXPECT_GT(rejected, 0);
  }
  EXPECT_GE(rejected, 50);  // every truncation at least
}

#include <fstream>
#include <iterator>

#include "pipeline/mmp/container.hpp"
#include "test_util.hpp"

TEST(Mmp, ContainerAndCliRoundTrip) {
  const std::string bin = VFPIPE_BIN, dir = test::tmp_path("mmp_cli");
  std::filesystem::create_directories(dir);
  const std::string y4m = dir + "/in.y4m", mmpf = dir + "/in.mmp";
  ASSERT_EQ(test::run_cmd(bin + " run -q -i 'synthetic=size=67x45:frames=2:noise=gauss:sigma=4' -o " + y4m).rc, 0);
  auto r = test::run_cmd(bin + " mmp encode " + y4m + " -o " + mmpf + " --lambda 20");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("2 frames 67x45 yuv420p"), std::string::npos) << r.out;
  r = test::run_cmd(bin + " mmp info " + mmpf);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("frame 1:"), std::string::npos) << r.out;
  ASSERT_EQ(test::run_cmd(bin + " mmp decode " + mmpf + " -o " + dir + "/out.y4m").rc, 0);
  ASSERT_EQ(test::run_cmd(bin + " mmp decode " + mmpf + " -o " + dir + "/first.png").rc, 0);
  // The reader decodes what the writer's encoder reconstructed.
  {
    FrameSpec s{PixelFormat::YUV420P, 67, 45, {25, 1}};
    mmp::Params p;
    p.lambda = 20;
    const std::string f2 = dir + "/direct.mmp";
    HostFrame src(s, false), rec(s, false), back(s, false);
    test::fill_random(src, 5);
    {
      mmp::Writer w(f2, s, p);
      const ImageView rv = rec.view();
      const mmp::FrameStats st = w.write(src.view(), &rv);
      EXPECT_GT(st.bits, 0);
      w.close();
    }
    mmp::Reader rd(f2);
    ASSERT_TRUE(rd.read(back));
    EXPECT_TRUE(back.same_pixels(rec));
    EXPECT_FALSE(rd.read(back));
  }
  // Malformed files: every truncation and header byte flipped gives an error or frames, never a crash.
  std::ifstream in(mmpf, std::ios::binary);
  const std::vector<uint8_t> good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t cut = 0; cut < good.size(); cut += std::max<size_t>(1, good.size() / 20)) {
    std::ofstream(dir + "/bad.mmp", std::ios::binary).write(reinterpret_cast<const char*>(good.data()), static_cast<std::streamsize>(cut));
    const auto rr = test::run_cmd(bin + " mmp decode " + dir + "/bad.mmp -o " + dir + "/bad.y4m");
    EXPECT_TRUE(rr.rc == 0 || rr.rc == 1) << rr.out;
  }
  for (size_t i = 0; i < 34; ++i) {
    std::vector<uint8_t> bad = good;
    bad[i] ^= 0xFF;
    std::ofstream(dir + "/bad.mmp", std::ios::binary).write(reinterpret_cast<const char*>(bad.data()), static_cast<std::streamsize>(bad.size()));
    const auto rr = test::run_cmd(bin + " mmp info " + dir + "/bad.mmp");
    EXPECT_TRUE(rr.rc == 0 || rr.rc == 1) << "byte " << i << ": " << rr.out;
  }
}

TEST(Mmp, PipelineStageOutputsTheDecodedFrames) {
  const std::string bin = VFPIPE_BIN, dir = test::tmp_path("mmp_stage");
  std::filesystem::create_directories(dir);
  auto r = test::run_cmd(bin + " run -i 'synthetic=size=64x48:frames=3:noise=gauss:sigma=3' -f 'mmp=lambda=30:file=" + dir +
                         "/s.mmp' -o " + dir + "/stage.y4m --device cpu");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("mmp (lambda 30): 3 frames"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PSNR"), std::string::npos) << r.out;
  ASSERT_EQ(test::run_cmd(bin + " mmp decode " + dir + "/s.mmp -o " + dir + "/decoded.y4m").rc, 0);
  std::ifstream a(dir + "/stage.y4m", std::ios::binary), b(dir + "/decoded.y4m", std::ios::binary);
  const std::string sa((std::istreambuf_iterator<char>(a)), std::istreambuf_iterator<char>());
  const std::string sb((std::istreambuf_iterator<char>(b)), std::istreambuf_iterator<char>());
  EXPECT_FALSE(sa.empty());
  EXPECT_EQ(sa, sb);  // what the stage passes on is what a decoder of its bitstream outputs
}
