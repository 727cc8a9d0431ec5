// Wavelet stage, CPU side: filters, geometry, perfect reconstruction, PyWavelets'
// coefficients and scikit-image's denoise_wavelet (via tests/pywt_reference.py), the
// shrinkage rules and thresholds by hand, options, errors and the stage in the engine.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.hpp"
#include "core/filter_parser.hpp"
#include "cpu/wavelet.hpp"
#include "stages/builtin.hpp"
#include "test_util.hpp"

using namespace vfp;

namespace {

std::vector<float> random_image(int w, int h, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(static_cast<size_t>(w) * h);
  for (auto& x : v) x = static_cast<float>(rng() & 255);
  return v;
}

const WaveletFilter& wav(const char* n) {
  const WaveletFilter* f = find_wavelet(n);
  if (!f) throw std::runtime_error(std::string("no wavelet ") + n);
  return *f;
}

// Runs tests/pywt_reference.py once per test program; nullptr when Python, PyWavelets or
// scikit-image are missing (then the test skips, or fails if VFPIPE_REQUIRE_PYWT is set: CI).
const nlohmann::json* pywt_reference() {
  static bool done = false;
  static nlohmann::json ref;
  if (!done) {
    done = true;
    const std::string out = test::tmp_path("pywt_reference.json");
    const std::string script = std::string(VFPIPE_SOURCE_DIR) + "/tests/pywt_reference.py";
    const std::string py = std::ifstream("/usr/bin/python3").good() ? "/usr/bin/python3" : "python3";
    if (std::system((py + " " + script + " " + out).c_str()) == 0) ref = nlohmann::json::parse(std::ifstream(out));
  }
  return ref.is_null() ? nullptr : &ref;
}

#define REQUIRE_PYWT(ref)                                                                       \
  const nlohmann::json* ref = pywt_reference();                                                 \
  if (!ref) {                                                                                   \
    if (std::getenv("VFPIPE_REQUIRE_PYWT")) FAIL() << "python3-pywt / python3-skimage missing"; \
    GTEST_SKIP() << "python3 with pywt and skimage not available";                              \
  }

}  // namespace

TEST(Wavelet, FilterTable) {
  EXPECT_EQ(wavelet_names().size(), 17u);
  for (const auto& n : wavelet_names()) {
    const WaveletFilter& f = wav(n.c_str());
    EXPECT_EQ(f.taps % 2, 0) << n;
    EXPECT_LE(f.taps, kWaveletMaxTaps) << n;
    double slo = 0, shi = 0;
    for (int j = 0; j < f.taps; ++j) {
      slo += f.dec_lo[j];
      shi += f.dec_hi[j];
    }
    EXPECT_NEAR(slo, std::sqrt(2.0), 1e-9) << n;  // low pass passes DC with gain sqrt(2)
    EXPECT_NEAR(shi, 0.0, 1e-9) << n;             // high pass rejects it
  }
  EXPECT_EQ(wav("db1").taps, 2);
  EXPECT_STREQ(wav("bior4.4").name, "cdf97");
  EXPECT_EQ(wav("cdf97").taps, 10);
  EXPECT_FALSE(wav("cdf97").orthogonal);
  EXPECT_EQ(find_wavelet("db9"), nullptr);
}

TEST(Wavelet, Geometry) {
  // pywt.dwt_coeff_len and dwt_max_level.
  EXPECT_EQ(dwt_length(13, 8, WaveletBoundary::Symmetric), 10);
  EXPECT_EQ(dwt_length(13, 8, WaveletBoundary::Periodization), 7);
  EXPECT_EQ(dwt_length(1, 2, WaveletBoundary::Symmetric), 1);
  EXPECT_EQ(dwt_max_level(1000, 8), 7);
  EXPECT_EQ(dwt_max_level(7, 8), 0);
  EXPECT_EQ(dwt_max_level(6, 8), 0);
  EXPECT_EQ(dwt_max_level(14, 8), 1);
  EXPECT_EQ(dwt_max_level(2160, 8), 8);
  WaveletParams p;  // db4, auto levels = max(maxlev - 3, 1)
  EXPECT_EQ(p.levels_for(3840, 2160), 5);
  EXPECT_EQ(p.levels_for(1, 1), 1);
  p.levels = 8;
  EXPECT_EQ(p.levels_for(3840, 2160), 8);
  p.levels = 9;
  EXPECT_THROW(p.levels_for(3840, 2160), OptionError);
  auto g = dwt_geometry(13, 9, 4, WaveletBoundary::Symmetric, 2);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].cw, 8);
  EXPECT_EQ(g[0].ch, 6);
  EXPECT_EQ(g[1].w, 8);
  EXPECT_EQ(g[1].cw, 5);
}

TEST(Wavelet, PerfectReconstruction) {
  const std::pair<int, int> sizes[] = {{1, 1}, {3, 7}, {17, 13}, {64, 48}, {101, 77}};
  double worst = 0;
  for (auto [w, h] : sizes)
    for (const auto& n : wavelet_names())
      for (WaveletBoundary b : {WaveletBoundary::Symmetric, WaveletBoundary::Periodization}) {
        const WaveletFilter& f = wav(n.c_str());
        const int maxlev = std::max(1, std::min(dwt_max_level(w, f.taps), dwt_max_level(h, f.taps)));
        for (int levels = 1; levels <= std::min(maxlev, 4); ++levels) {
          auto img = random_image(w, h, static_cast<uint32_t>(w * 31 + h + levels));
          WaveletCoeffs c = wavedec2_cpu(img.data(), w, h, w, f, b, levels);
          std::vector<float> rec(img.size());
          waverec2_cpu(c, f, b, rec.data());
          for (size_t i = 0; i < img.size(); ++i) {
            worst = std::max(worst, static_cast<double>(std::fabs(rec[i] - img[i])));
            ASSERT_NEAR(rec[i], img[i], 1e-3) << n << " " << w << "x" << h << " levels " << levels;
          }
        }
      }
  // Float32 arithmetic on 0..255 samples: the error is a few ulps of 255.
  RecordProperty("max_abs_error", std::to_string(worst));
  EXPECT_LT(worst, 2e-4);
}

TEST(Wavelet, PerfectReconstructionUnitRange) {
  // The bound, 1e-4, on samples in [0, 1) (float images as PyWavelets sees them).
  const int w = 101, h = 77;
  for (const auto& n : wavelet_names())
    for (WaveletBoundary b : {WaveletBoundary::Symmetric, WaveletBoundary::Periodization}) {
      auto img = random_image(w, h, 5);
      for (auto& x : img) x /= 256.f;
      const WaveletFilter& f = wav(n.c_str());
      WaveletCoeffs c = wavedec2_cpu(img.data(), w, h, w, f, b, 3);
      std::vector<float> rec(img.size());
      waverec2_cpu(c, f, b, rec.data());
      for (size_t i = 0; i < img.size(); ++i) ASSERT_NEAR(rec[i], img[i], 1e-4) << n;
    }
}

TEST(WaveletPywt, CoefficientsMatchPyWavelets) {
  REQUIRE_PYWT(ref);
  size_t cases = 0;
  double worst = 0;
  for (const auto& c : (*ref)["dwt"]) {
    const WaveletFilter& f = wav(c["wavelet"].get<std::string>().c_str());
    const WaveletBoundary b =
        c["mode"] == "periodization" ? WaveletBoundary::Periodization : WaveletBoundary::Symmetric;
    const int w = c["w"], h = c["h"], levels = c["levels"];
    std::vector<float> img;
    for (double v : c["input"]) img.push_back(static_cast<float>(v));
    WaveletCoeffs ours = wavedec2_cpu(img.data(), w, h, w, f, b, levels);
    const std::string what = c["wavelet"].get<std::string>() + " " + c["mode"].get<std::string>() + " " +
                             std::to_string(w) + "x" + std::to_string(h);
    auto check = [&](const std::vector<float>& mine, const nlohmann::json& theirs, const std::string& band) {
      ASSERT_EQ(mine.size(), theirs.size()) << what << " " << band;
      for (size_t i = 0; i < mine.size(); ++i) {
        const double t = theirs[i];
        worst = std::max(worst, std::fabs(mine[i] - t) / std::max(1.0, std::fabs(t)));
        ASSERT_NEAR(mine[i], t, 2e-6 * std::max(1.0, std::fabs(t)) + 2e-4) << what << " " << band << " [" << i << "]";
      }
    };
    check(ours.approx, c["approx"], "approx");
    for (int l = 0; l < levels; ++l) {
      check(ours.da[static_cast<size_t>(l)], c["details"][l][0], "da" + std::to_string(l + 1));
      check(ours.ad[static_cast<size_t>(l)], c["details"][l][1], "ad" + std::to_string(l + 1));
      check(ours.dd[static_cast<size_t>(l)], c["details"][l][2], "dd" + std::to_string(l + 1));
    }
    ++cases;
  }
  EXPECT_EQ(cases, 17u * 2 * 4);  // every wavelet x both modes x four sizes
  RecordProperty("max_rel_error", std::to_string(worst));
}

TEST(WaveletPywt, DenoiseMatchesScikitImage) {
  REQUIRE_PYWT(ref);
  for (const auto& c : (*ref)["denoise"]) {
    WaveletParams p;
    p.wavelet = &wav(c["wavelet"].get<std::string>().c_str());
    p.method = c["method"] == "visushrink" ? ShrinkMethod::VisuShrink : ShrinkMethod::BayesShrink;
    p.mode = c["mode"] == "hard" ? ShrinkMode::Hard : ShrinkMode::Soft;
    p.levels = c["levels"];
    const int w = c["w"], h = c["h"];
    std::vector<uint8_t> in, out(static_cast<size_t>(w) * h);
    for (int v : c["input"]) in.push_back(static_cast<uint8_t>(v));
    // The noise estimate: the MAD of pywt's band of the same image.
    std::vector<float> img(in.begin(), in.end());
    WaveletCoeffs c1 = wavedec2_cpu(img.data(), w, h, w, *p.wavelet, WaveletBoundary::Symmetric, 1);
    const double sigma = estimate_sigma_mad(c1.dd[0].data(), c1.dd[0].size()), want = c["sigma"];
    EXPECT_NEAR(sigma, want, 1e-5 * want) << c["wavelet"];
    p.sigma = want;
    wavelet_denoise_plane_cpu(in.data(), w, out.data(), w, w, h, p);
    int off = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      const double e = std::min(255.0, std::max(0.0, c["expected"][i].get<double>()));
      // Ours is rounded to 8 bits: within half a level (plus float slack) of scikit-image.
      if (std::fabs(out[i] - e) > 0.5 + 2e-3) ++off;
    }
    EXPECT_EQ(off, 0) << c["wavelet"] << " " << c["method"] << " " << c["mode"] << " " << w << "x" << h;
    // At 16 bits the result is not rounded to 8: within half a 16-bit unit (1/514 of a
    // level) of scikit-image's float output, plus float slack.
    std::vector<uint16_t> in16(in.size()), out16(in.size());
    for (size_t i = 0; i < in.size(); ++i) in16[i] = static_cast<uint16_t>(in[i] * 257);
    wavelet_denoise_plane_cpu(in16.data(), 2 * w, out16.data(), 2 * w, w, h, p);
    double worst = 0;
    for (size_t i = 0; i < out16.size(); ++i) {
      const double e = std::min(255.0, std::max(0.0, c["expected"][i].get<double>()));
      worst = std::max(worst, std::fabs(out16[i] / 257.0 - e));
    }
    EXPECT_LE(worst, 0.5 / 257 + 2e-3) << c["wavelet"] << " " << c["method"] << " " << w << "x" << h;
  }
}

TEST(WaveletStage, SixteenBitOutputKeepsWhatEightBitsRound) {
  // A noisy gradient denoised at 8 and at 16 bits: the 16-bit result is the 8-bit path's
  // float result before rounding, so it is within half a level of the 8-bit one and closer
  // to the clean image (lower MSE: the rounding's 1/12 level^2 is gone).
  const int w = 96, h = 64;
  std::mt19937 rng(12);
  std::normal_distribution<double> noise(0, 12);
  std::vector<uint8_t> clean(static_cast<size_t>(w) * h), noisy(clean.size()), out8(clean.size());
  std::vector<uint16_t> noisy16(clean.size()), out16(clean.size());
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const size_t i = static_cast<size_t>(y) * w + x;
      clean[i] = static_cast<uint8_t>(40 + x + y);
      noisy[i] = static_cast<uint8_t>(std::clamp(std::lround(clean[i] + noise(rng)), 0L, 255L));
      noisy16[i] = static_cast<uint16_t>(noisy[i] * 257);
    }
  WaveletParams p;
  p.wavelet = &wav("db4");
  const WaveletThresholds t8 = wavelet_denoise_plane_cpu(noisy.data(), w, out8.data(), w, w, h, p);
  const WaveletThresholds t16 = wavelet_denoise_plane_cpu(noisy16.data(), 2 * w, out16.data(), 2 * w, w, h, p);
  EXPECT_NEAR(t16.sigma, t8.sigma, 1e-4 * t8.sigma);  // sigma on the 8-bit scale at both depths
  double mse8 = 0, mse16 = 0;
  for (size_t i = 0; i < clean.size(); ++i) {
    ASSERT_LE(std::fabs(out16[i] / 257.0 - out8[i]), 0.5 + 1e-3) << i;
    mse8 += std::pow(out8[i] - clean[i], 2);
    mse16 += std::pow(out16[i] / 257.0 - clean[i], 2);
  }
  EXPECT_LT(mse16, mse8);
  // Through the CLI: format=gray16le before the stage, 16-bit Y4M out.
  const std::string bin = VFPIPE_BIN, out = test::tmp_path("wavelet16.y4m");
  test::CmdResult r = test::run_cmd(bin +
                                    " run -i 'synthetic=size=64x48:frames=2:format=gray:noise=gauss:sigma=10' -f "
                                    "'format=gray16le,wavelet=db2:levels=2' -o " +
                                    out + " --device cpu --no-progress");
  ASSERT_EQ(r.rc, 0) << r.out;
  std::ifstream f(out, std::ios::binary);
  std::string y4m((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(y4m.rfind("YUV4MPEG2 W64 H48", 0), 0u);
  EXPECT_NE(y4m.find("Cmono16"), std::string::npos);
  EXPECT_EQ(y4m.size(), y4m.find('\n') + 1 + 2 * (6 + 64 * 48 * 2));
}

TEST(Wavelet, ShrinkRules) {
  const float T = 10.f;
  EXPECT_FLOAT_EQ(wavelet_shrink(15.f, T, ShrinkMode::Soft, 1.f), 5.f);
  EXPECT_FLOAT_EQ(wavelet_shrink(-15.f, T, ShrinkMode::Soft, 1.f), -5.f);
  EXPECT_FLOAT_EQ(wavelet_shrink(9.f, T, ShrinkMode::Soft, 1.f), 0.f);
  EXPECT_FLOAT_EQ(wavelet_shrink(10.f, T, ShrinkMode::Hard, 1.f), 10.f);  // pywt keeps |x| >= T
  EXPECT_FLOAT_EQ(wavelet_shrink(9.9f, T, ShrinkMode::Hard, 1.f), 0.f);
  EXPECT_FLOAT_EQ(wavelet_shrink(20.f, T, ShrinkMode::Garrote, 1.f), 15.f);  // 20 - 100/20
  EXPECT_FLOAT_EQ(wavelet_shrink(-20.f, T, ShrinkMode::Garrote, 1.f), -15.f);
  EXPECT_FLOAT_EQ(wavelet_shrink(5.f, T, ShrinkMode::Garrote, 1.f), 0.f);
  // Partial shrinkage (vaguedenoiser percent=85).
  EXPECT_FLOAT_EQ(wavelet_shrink(5.f, T, ShrinkMode::Soft, 0.85f), 5.f * 0.15f);
  EXPECT_FLOAT_EQ(wavelet_shrink(15.f, T, ShrinkMode::Soft, 0.85f), 15.f - 8.5f);
  EXPECT_FLOAT_EQ(wavelet_shrink(20.f, T, ShrinkMode::Garrote, 0.85f), 20.f * (1.f - 0.85f * 100.f / 400.f));
  EXPECT_FLOAT_EQ(wavelet_shrink(7.f, 0.f, ShrinkMode::Soft, 1.f), 7.f);
  EXPECT_EQ(wavelet_quantise(-3.f), 0);
  EXPECT_EQ(wavelet_quantise(2.5f), 3);
  EXPECT_EQ(wavelet_quantise(2.49f), 2);
  EXPECT_EQ(wavelet_quantise(300.f), 255);
}

TEST(Wavelet, SigmaEstimateByHand) {
  // Zeros count; even count -> mean of the two middle |values| (numpy's median).
  const float d[] = {0.f, -4.f, 1.f, 0.f, 3.f, -2.f};  // 0 0 1 2 3 4 -> 1.5
  EXPECT_NEAR(estimate_sigma_mad(d, 6), 1.5 / kMadToSigma, 1e-12);
  const float e[] = {5.f, -1.f, 7.f, 2.f, -9.f};  // 1 2 5 7 9 -> 5
  EXPECT_NEAR(estimate_sigma_mad(e, 5), 5.0 / kMadToSigma, 1e-12);
  const float z[] = {0.f, -0.f};
  EXPECT_EQ(estimate_sigma_mad(z, 2), 0.0);
}

TEST(Wavelet, ThresholdsByHand) {
  // One level of haar on a 4x4 image: check BayesShrink and VisuShrink against the formulas.
  std::vector<float> img = {10, 12, 9, 30, 11, 13, 8, 31, 50, 52, 49, 70, 51, 53, 48, 72};
  const WaveletFilter& f = wav("haar");
  WaveletCoeffs c = wavedec2_cpu(img.data(), 4, 4, 4, f, WaveletBoundary::Symmetric, 1);
  WaveletParams p;
  p.wavelet = &f;
  p.levels = 1;
  p.sigma = 0.5;
  WaveletThresholds t = wavelet_thresholds_cpu(c, p, 4, 4);
  ASSERT_EQ(t.t.size(), 3u);
  const std::vector<float>* bands[3] = {&c.da[0], &c.ad[0], &c.dd[0]};
  for (int b = 0; b < 3; ++b) {
    double s = 0;
    for (float x : *bands[b]) s += x * x;
    const double dvar = s / 4, var = 0.25;
    const double expect = dvar - var > FLT_EPSILON ? var / std::sqrt(dvar - var) : var / std::sqrt(FLT_EPSILON);
    EXPECT_NEAR(t.t[static_cast<size_t>(b)], expect, 1e-4 * expect) << b;
  }
  p.method = ShrinkMethod::VisuShrink;
  t = wavelet_thresholds_cpu(c, p, 4, 4);
  EXPECT_NEAR(t.t[0], 0.5 * std::sqrt(2 * std::log(16.0)), 1e-6);
  p.method = ShrinkMethod::Fixed;
  p.threshold = 7;
  t = wavelet_thresholds_cpu(c, p, 4, 4);
  EXPECT_FLOAT_EQ(t.t[2], 7.f);
}

TEST(Wavelet, DenoisingReducesNoise) {
  // A smooth image plus Gaussian noise: BayesShrink must bring it closer to the clean one.
  const int w = 160, h = 120;
  std::mt19937 rng(3);
  std::normal_distribution<float> noise(0.f, 20.f);
  std::vector<uint8_t> clean(static_cast<size_t>(w) * h), noisy(clean.size()), out(clean.size());
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const float v = 120.f + 60.f * std::sin(x / 11.f) * std::cos(y / 13.f);
      clean[static_cast<size_t>(y) * w + x] = static_cast<uint8_t>(std::lround(v));
      noisy[static_cast<size_t>(y) * w + x] = wavelet_quantise(v + noise(rng));
    }
  auto mse = [&](const std::vector<uint8_t>& a) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += (a[i] - clean[i]) * (a[i] - clean[i]);
    return s / static_cast<double>(a.size());
  };
  WaveletParams p;
  p.levels = 3;
  WaveletThresholds t = wavelet_denoise_plane_cpu(noisy.data(), w, out.data(), w, w, h, p);
  EXPECT_NEAR(t.sigma, 20.0, 3.0);  // the MAD estimate finds the noise level
  EXPECT_LT(mse(out), mse(noisy) / 4);
  // sigma given = the estimator skipped; threshold 0 (fixed) = the identity.
  p.method = ShrinkMethod::Fixed;
  p.threshold = 0;
  wavelet_denoise_plane_cpu(noisy.data(), w, out.data(), w, w, h, p);
  EXPECT_EQ(out, noisy);
}

namespace {
std::unique_ptr<Stage> make(const std::string& filters) {
  auto st = build_stages(filters);
  return std::move(st.at(0));
}
std::string error_of(const std::string& filters) {
  try {
    make(filters);
  } catch (const ParseError& e) {
    return e.pretty();
  }
  return "";
}
}  // namespace

TEST(WaveletStage, OptionsAndSpellings) {
  EXPECT_EQ(make("wavelet")->label(), "wavelet(db4,bayes,soft)");
  EXPECT_EQ(make("wdenoise=sym8:method=visushrink:mode=hard:levels=2")->label(), "wavelet(sym8,visu,hard,2 levels)");
  // vaguedenoiser: threshold + method=garrote + nsteps + percent.
  EXPECT_EQ(make("wavelet=threshold=4:method=garrote:nsteps=3:percent=85")->label(),
            "wavelet(db4,fixed,garrote,3 levels)");
  EXPECT_EQ(make("wavelet=threshold=4")->label(), "wavelet(db4,fixed,soft)");
  EXPECT_EQ(make("wavelet=method=hard")->label(), "wavelet(db4,bayes,hard)");
}

TEST(WaveletStage, BadInputErrors) {
  EXPECT_NE(error_of("wavelet=db9").find("invalid value 'db9' for option 'wavelet'"), std::string::npos);
  EXPECT_NE(error_of("wavelet=db4:boundary=zero").find("expected one of symmetric, periodization"), std::string::npos);
  EXPECT_NE(error_of("wavelet=sigma=-2").find("out of range"), std::string::npos);
  EXPECT_NE(error_of("wavelet=mode=fuzzy").find("expected one of soft, hard, garrote"), std::string::npos);
  EXPECT_NE(error_of("wavelet=method=fixed").find("needs threshold"), std::string::npos);
  EXPECT_NE(error_of("wavelet=method=visushrink:threshold=3").find("method=fixed only"), std::string::npos);
  EXPECT_NE(error_of("wavelet=method=soft:mode=hard").find("contradicts"), std::string::npos);
  // The caret points at the offending value.
  const std::string e = error_of("median,wavelet=method=fixed:mode=soft");
  EXPECT_NE(e.find("wavelet=method=fixed"), std::string::npos) << e;
  // Levels beyond the frame: at configure, naming the limit.
  auto st = make("wavelet=levels=9");
  FrameSpec s;
  s.width = 3840;
  s.height = 2160;
  try {
    st->configure(s);
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("at most 8"), std::string::npos) << err.what();
  }
  s.format = PixelFormat::BGR24;
  EXPECT_THROW(make("wavelet")->configure(s), Error);
}

TEST(WaveletStage, PlanesAndFormats) {
  // yuv420p with planes=1: luma denoised, chroma copied; equals the per-plane reference.
  FrameSpec spec;
  spec.format = PixelFormat::YUV420P;
  spec.width = 67;
  spec.height = 45;
  HostFrame in(spec, false), out(spec, false);
  test::fill_random(in, 9);
  auto st = make("wavelet=db2:levels=2:planes=1");
  st->configure(spec);
  st->prepare(Backend::CPU, 1);
  st->run_cpu(in.view(), out.view(), StageContext{});
  ImageView iv = in.view(), ov = out.view();
  std::vector<uint8_t> ref(static_cast<size_t>(iv.pw[0]) * iv.ph[0]);
  WaveletParams p;
  p.wavelet = &wav("db2");
  p.levels = 2;
  wavelet_denoise_plane_cpu(iv.data[0], iv.pitch[0], ref.data(), iv.pw[0], iv.pw[0], iv.ph[0], p);
  for (int y = 0; y < iv.ph[0]; ++y)
    for (int x = 0; x < iv.pw[0]; ++x) ASSERT_EQ(ov.row(0, y)[x], ref[static_cast<size_t>(y) * iv.pw[0] + x]);
  for (int pl = 1; pl < 3; ++pl)
    for (int y = 0; y < iv.ph[pl]; ++y)
      ASSERT_EQ(0, std::memcmp(ov.row(pl, y), iv.row(pl, y), static_cast<size_t>(iv.pw[pl])));
  // Live change of the threshold takes effect on the next frame.
  Options o = st->options();
  o.set("method", "fixed", true);
  o.set("threshold", "1000", true);
  st->update(o);
  st->run_cpu(in.view(), out.view(), StageContext{});
  // Every detail coefficient zeroed: the output is the approximation only (smooth).
  EXPECT_NE(0, std::memcmp(ov.row(0, 0), ref.data(), static_cast<size_t>(iv.pw[0])));
}

TEST(WaveletStage, WiredIntoTheCli) {
  const std::string bin = VFPIPE_BIN;
  test::CmdResult r = test::run_cmd(bin + " filters wavelet");
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("bayesshrink"), std::string::npos);
  EXPECT_NE(r.out.find("nsteps"), std::string::npos);
  const std::string out = test::tmp_path("wavelet_cli.y4m");
  r = test::run_cmd(bin +
                    " run -i 'synthetic=size=96x64:frames=4:noise=gauss:sigma=15' -f 'wdenoise=sym4:levels=2' -o " +
                    out + " --device cpu --no-progress");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("wavelet(sym4,bayes,soft,2 levels)"), std::string::npos) << r.out;
  std::ifstream f(out, std::ios::binary);
  std::string y4m((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t frames = 0;
  for (size_t p = y4m.find("FRAME"); p != std::string::npos; p = y4m.find("FRAME", p + 5)) ++frames;
  EXPECT_EQ(frames, 4u);
  r = test::run_cmd(bin + " run -i synthetic -f 'wavelet=wave=db4:mode=soft:method=soft:mode=hard'");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("given twice"), std::string::npos) << r.out;
}
