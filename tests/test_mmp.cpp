// MMP intra codec core (codecs/mmp/mmp.hpp): the decoder reproduces the
// encoder's reconstruction bit for bit on random, flat, gradient and text-like
// planes of odd sizes and several lambdas; rate and distortion move the right
// way with lambda; every prediction mode and both split directions are used;
// the scale transform's rounding; corrupt and truncated data never crash and
// truncation is reported.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <tuple>

#include "codecs/mmp/container.hpp"
#include "codecs/mmp/dictionary.hpp"
#include "codecs/mmp/mmp.hpp"
#include "codecs/mmp/postfilter.hpp"
#include "codecs/mmp/range_coder.hpp"
#include "codecs/mmp/search.hpp"
#include "codecs/mmp/sum_order.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "io/open.hpp"
#include "mmp_reference.hpp"
#include "pipeline/engine.hpp"
#include "pipeline/profile.hpp"
#include "stages/builtin.hpp"
#include "test_util.hpp"

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
      if (kind == "photo")
        o = static_cast<uint8_t>(
            std::clamp(128 + 60 * std::sin(x / 9.0) * std::cos(y / 7.0) + std::normal_distribution<double>(0, 4)(rng),
                       0.0, 255.0));
    }
  return v;
}

double psnr(double sse, size_t n) { return sse == 0 ? 99 : 10 * std::log10(255.0 * 255.0 * n / sse); }

// Writes `src` n times to the .mmp file f; each frame's reconstruction goes to `recs`; the
// bits of each frame.
std::vector<double> write_frames(const std::string& f, const mmp::Params& p, const HostFrame& src, int n,
                                 std::deque<HostFrame>& recs) {
  std::vector<double> bits;
  mmp::Writer wr(f, src.spec(), p);
  for (int i = 0; i < n; ++i) {
    recs.emplace_back(src.spec(), false);
    const ImageView rv = recs.back().view();
    bits.push_back(wr.write(src.view(), &rv).bits);
  }
  wr.close();
  return bits;
}

}  // namespace

TEST(Mmp, ScaleTransformRounding) {
  // Shrinking averages with rounding half up; enlarging repeats.
  EXPECT_EQ(mmp::resize_element({1, 2, 3, 4}, 2, 0, 1, 0), (std::vector<int16_t>{2, 4}));     // 1.5 -> 2, 3.5 -> 4
  EXPECT_EQ(mmp::resize_element({-1, -2, 5, 5}, 2, 0, 1, 0), (std::vector<int16_t>{-1, 5}));  // -1.5 -> -1
  EXPECT_EQ(mmp::resize_element({7, -3}, 1, 0, 2, 0), (std::vector<int16_t>{7, 7, -3, -3}));
  EXPECT_EQ(mmp::resize_element({1, 2, 3, 4}, 1, 1, 0, 0), (std::vector<int16_t>{3}));  // 2.5 -> 3
  EXPECT_EQ(mmp::resize_element({9}, 0, 0, 1, 1), (std::vector<int16_t>{9, 9, 9, 9}));
  EXPECT_EQ(mmp::resize_element({1, 2, 3, 4}, 2, 0, 0, 2),
            (std::vector<int16_t>{3, 3, 3, 3}));  // 2.5 -> 3, then repeated
}

// The scale transform against its definition written out plainly (docs/mmp.md): rows
// first, then columns; shrinking by k = 2^d takes floor((2 sum + k) / 2k) of k neighbours,
// enlarging repeats. Every pair of scales up to 32x32, residues over the whole range.
TEST(Mmp, ScaleTransformMatchesItsDefinitionAtEveryScale) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> value(-510, 510);
  const auto floor_div = [](int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); };
  const auto resize_1d = [&](const std::vector<int>& in, int n2) {
    const int n1 = static_cast<int>(in.size());
    std::vector<int> out(static_cast<size_t>(n2));
    for (int x = 0; x < n2; ++x) {
      if (n2 >= n1) {
        out[static_cast<size_t>(x)] = in[static_cast<size_t>(x / (n2 / n1))];
      } else {
        const int k = n1 / n2;
        int sum = 0;
        for (int i = 0; i < k; ++i) sum += in[static_cast<size_t>(x * k + i)];
        out[static_cast<size_t>(x)] = floor_div(2 * sum + k, 2 * k);
      }
    }
    return out;
  };
  for (int lw1 = 0; lw1 <= 5; ++lw1)
    for (int lh1 = 0; lh1 <= 5; ++lh1)
      for (int trial = 0; trial < 3; ++trial) {
        const int w1 = 1 << lw1, h1 = 1 << lh1;
        std::vector<int16_t> e(static_cast<size_t>(w1 * h1));
        for (int16_t& v : e) v = static_cast<int16_t>(trial == 2 ? -510 + (rng() % 3) : value(rng));
        for (int lw2 = 0; lw2 <= 5; ++lw2)
          for (int lh2 = 0; lh2 <= 5; ++lh2) {
            const int w2 = 1 << lw2, h2 = 1 << lh2;
            std::vector<std::vector<int>> rows(static_cast<size_t>(h1));
            for (int y = 0; y < h1; ++y)
              rows[static_cast<size_t>(y)] =
                  resize_1d(std::vector<int>(e.begin() + y * w1, e.begin() + (y + 1) * w1), w2);
            std::vector<int16_t> want(static_cast<size_t>(w2 * h2));
            for (int x = 0; x < w2; ++x) {
              std::vector<int> col(static_cast<size_t>(h1));
              for (int y = 0; y < h1; ++y)
                col[static_cast<size_t>(y)] = rows[static_cast<size_t>(y)][static_cast<size_t>(x)];
              const std::vector<int> c = resize_1d(col, h2);
              for (int y = 0; y < h2; ++y)
                want[static_cast<size_t>(y * w2 + x)] = static_cast<int16_t>(c[static_cast<size_t>(y)]);
            }
            ASSERT_EQ(mmp::resize_element(e, lw1, lh1, lw2, lh2), want)
                << w1 << "x" << h1 << " -> " << w2 << "x" << h2 << ", trial " << trial;
          }
      }
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

TEST(Mmp, EveryModeUnitSizeAndSplitDirectionIsUsed) {
  // Planes that favour each predictor: stripes along both diagonals and the
  // steep and flat diagonal directions, gradients, text, a photo-like plane and
  // noise, coded with every mode searched; each mode, unit size and split
  // direction must be chosen somewhere.
  const int w = 64, h = 64;
  int64_t modes[mmp::kModes] = {}, sizes[4] = {}, splits[2] = {};
  const std::vector<std::pair<int, int>> directions = {{1, 1}, {1, -1}, {2, 1}, {2, -1},
                                                       {1, 2}, {1, -2}, {0, 1}, {1, 0}};
  std::vector<std::vector<uint8_t>> planes;
  for (auto [dx, dy] : directions) {
    std::vector<uint8_t> v(static_cast<size_t>(w) * h);
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        v[static_cast<size_t>(y) * w + x] = static_cast<uint8_t>(((x * dx + y * dy + 256) / 3) % 4 < 2 ? 50 : 210);
    planes.push_back(v);
  }
  for (const char* kind : {"gradient", "text", "photo", "random"}) planes.push_back(plane(kind, w, h, 7));
  for (const auto& img : planes) {
    mmp::Params p;
    p.lambda = 8;
    p.mode_candidates = mmp::kModes;
    const mmp::PlaneResult r = mmp::encode_plane(img.data(), w, h, p);
    ASSERT_EQ(mmp::decode_plane(r.bytes.data(), r.bytes.size(), w, h, p), r.recon);
    for (int m = 0; m < mmp::kModes; ++m) modes[m] += r.modes[m];
    for (int k = 0; k < 4; ++k) sizes[k] += r.unit_sizes[k];
    for (int k = 0; k < 2; ++k) splits[k] += r.splits[k];
    EXPECT_GT(r.dict_elements, 25 * 64);  // the dictionaries learned
  }
  for (int m = 0; m < mmp::kModes; ++m) EXPECT_GT(modes[m], 0) << "mode " << mmp::mode_name(m) << " never chosen";
  EXPECT_EQ(sizes[0], 0);  // no 32x32 units in 16x16 blocks
  for (int k = 1; k < 4; ++k) EXPECT_GT(sizes[k], 0) << "unit size " << (32 >> k) << " never chosen";
  EXPECT_GT(splits[0], 0);
  EXPECT_GT(splits[1], 0);
}

TEST(Mmp, BlockSizes8And32DecodeExactly) {
  // 8x8 and 32x32 blocks on odd sizes (padding cropped), several lambdas: decoder ==
  // encoder; 32x32 blocks choose 32x32 units on smooth content, 8x8 blocks never have
  // units above 8x8.
  for (int block_log : {3, 5}) {
    int64_t sizes[4] = {};
    for (auto [w, h] : {std::pair{1, 1}, {37, 21}, {45, 70}})
      for (const char* kind : {"gradient", "text", "photo", "random"})
        for (double lambda : {5.0, 60.0, 600.0}) {
          const auto img = plane(kind, w, h, static_cast<uint32_t>(w + h));
          mmp::Params p;
          p.lambda = lambda;
          p.block_log = block_log;
          const mmp::PlaneResult r = mmp::encode_plane(img.data(), w, h, p);
          ASSERT_EQ(mmp::decode_plane(r.bytes.data(), r.bytes.size(), w, h, p), r.recon)
              << "block " << (1 << block_log) << " " << kind << " " << w << "x" << h << " lambda " << lambda;
          const int B = 1 << block_log;
          EXPECT_EQ(r.blocks, static_cast<int64_t>((w + B - 1) / B) * ((h + B - 1) / B));
          for (int k = 0; k < 4; ++k) sizes[k] += r.unit_sizes[k];
        }
    if (block_log == 5) {
      EXPECT_GT(sizes[0], 0) << "no 32x32 unit chosen";
    } else {
      EXPECT_EQ(sizes[0] + sizes[1], 0);
      EXPECT_GT(sizes[2], 0);
      EXPECT_GT(sizes[3], 0);
    }
  }
  mmp::Params bad;
  bad.block_log = 6;
  const auto img = plane("flat", 8, 8, 1);
  EXPECT_THROW(mmp::encode_plane(img.data(), 8, 8, bad), Error);
}

TEST(Mmp, PlanePredictionOf32x32FollowsARamp) {
  // Neighbours on the plane v = 40 + 2x + y: the 32x32 plane mode (slopes in 1/1024)
  // continues it within one level.
  const int W = 64, H = 64;
  std::vector<uint8_t> rec(W * H), done(W * H, 0);
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) {
      rec[static_cast<size_t>(y) * W + x] = static_cast<uint8_t>(40 + (2 * x + y) / 2);
      if (y < 16 || x < 16) done[static_cast<size_t>(y) * W + x] = 1;
    }
  int pred[32 * 32];
  mmp::predict_block(rec.data(), done.data(), W, H, 16, 16, 32, 4 /* plane */, pred);
  int worst = 0;
  for (int y = 0; y < 32; ++y)
    for (int x = 0; x < 32; ++x)
      worst = std::max(worst, std::abs(pred[y * 32 + x] - rec[static_cast<size_t>(16 + y) * W + 16 + x]));
  EXPECT_LE(worst, 1);
}

TEST(Mmp, PredictionModesFollowTheirDefinitions) {
  // A 16x16 plane whose first row and column are known; the 4x4 block at (4, 4)
  // predicts from row 3 and column 3.
  const int W = 16, H = 16;
  std::vector<uint8_t> rec(W * H), done(W * H, 0);
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) rec[static_cast<size_t>(y * W + x)] = static_cast<uint8_t>(10 + 3 * x + 5 * y);
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < W; ++x) done[static_cast<size_t>(y * W + x)] = 1;  // row above, incl. above-right
  for (int y = 4; y < 8; ++y)
    for (int x = 0; x < 4; ++x) done[static_cast<size_t>(y * W + x)] = 1;
  auto at = [&](int x, int y) { return static_cast<int>(rec[static_cast<size_t>(y * W + x)]); };
  int pred[256];
  mmp::predict_block(rec.data(), done.data(), W, H, 4, 4, 4, 0, pred);  // none
  for (int i = 0; i < 16; ++i) EXPECT_EQ(pred[i], 128);
  mmp::predict_block(rec.data(), done.data(), W, H, 4, 4, 4, 2,
                     pred);  // vertical
  for (int i = 0; i < 16; ++i) EXPECT_EQ(pred[i], at(4 + i % 4, 3));
  mmp::predict_block(rec.data(), done.data(), W, H, 4, 4, 4, 3,
                     pred);  // horizontal
  for (int i = 0; i < 16; ++i) EXPECT_EQ(pred[i], at(3, 4 + i / 4));
  mmp::predict_block(rec.data(), done.data(), W, H, 4, 4, 4, 1, pred);  // DC
  int sum = 0;
  for (int i = 0; i < 4; ++i) sum += at(4 + i, 3) + at(3, 4 + i);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(pred[i], (sum + 4) / 8);
  // A plane (linear ramp) is reproduced by the plane mode at every unit size.
  for (int N : {4, 8}) {
    mmp::predict_block(rec.data(), done.data(), W, H, 8, 8, N, 4, pred);
    for (int i = 0; i < N * N; ++i) EXPECT_NEAR(pred[i], at(8 + i % N, 8 + i / N), 1) << N;
  }
  // Diagonal down-left smooths the row above along the anti-diagonal (H.264 4x4
  // formula).
  mmp::predict_block(rec.data(), done.data(), W, H, 4, 4, 4, 5, pred);
  EXPECT_EQ(pred[0], (at(4, 3) + 2 * at(5, 3) + at(6, 3) + 2) >> 2);
  EXPECT_EQ(pred[15], (at(10, 3) + 3 * at(11, 3) + 2) >> 2);
  // Diagonal down-right: the corner on the diagonal.
  mmp::predict_block(rec.data(), done.data(), W, H, 4, 4, 4, 6, pred);
  EXPECT_EQ(pred[0], (at(4, 3) + 2 * at(3, 3) + at(3, 4) + 2) >> 2);
  // Without the above-right block decoded, its samples repeat the last one
  // above.
  std::vector<uint8_t> not_done(done);
  for (int x = 8; x < 12; ++x) not_done[static_cast<size_t>(3 * W + x)] = 0;
  mmp::predict_block(rec.data(), not_done.data(), W, H, 4, 4, 4, 5, pred);
  EXPECT_EQ(pred[15], (at(7, 3) + 3 * at(7, 3) + 2) >> 2);
  // At the plane's corner nothing is available: every mode predicts 128.
  for (int m = 0; m < mmp::kModes; ++m) {
    mmp::predict_block(rec.data(), done.data(), W, H, 0, 0, 4, m, pred);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(pred[i], 128) << mmp::mode_name(m);
  }
}

TEST(Mmp, PrunedSearchMakesTheExhaustiveSearchsDecisions) {
  for (const char* kind : {"photo", "text", "random"}) {
    const auto img = plane(kind, 40, 36, 11);
    mmp::Params p;
    p.lambda = 25;
    const mmp::PlaneResult fast = mmp::encode_plane(img.data(), 40, 36, p);
    p.exhaustive = true;
    const mmp::PlaneResult slow = mmp::encode_plane(img.data(), 40, 36, p);
    EXPECT_EQ(fast.bytes, slow.bytes) << kind;
    EXPECT_EQ(fast.recon, slow.recon) << kind;
  }
}

// The leaf table's layout (search.hpp's closed forms): scales in order lh = 0..L, lw = 0..L
// within, each (N >> lw) x (N >> lh) segments, one after another with no gap, for every
// unit size the codec has (4x4 .. 32x32) and the 1x1 .. 2x2 ones around them.
TEST(Mmp, LeafTableLayoutHoldsEverySegmentOnce) {
  for (int L = 0; L <= 5; ++L) {
    const int N = 1 << L;
    int at = 0;
    for (int lh = 0; lh <= L; ++lh)
      for (int lw = 0; lw <= L; ++lw) {
        EXPECT_EQ(mmp::leaf_scale_offset(L, lw, lh), at) << "unit " << N << ", scale " << lw << "," << lh;
        at += (N >> lw) * (N >> lh);
      }
    EXPECT_EQ(mmp::leaf_table_size(L), at) << "unit " << N;
  }
}

// The leaf search is replaceable (codecs/mmp/search.hpp): an exhaustive backend gives the
// pruned CPU search's bytes, untiled and in every tile mode, at every block size.
TEST(Mmp, AnotherLeafSearchGivesTheSameBytes) {
  EXPECT_EQ(mmp::leaf_table_size(2), 7 * 7);  // (4 + 2 + 1)^2 segments of a 4x4 unit
  EXPECT_EQ(mmp::leaf_table_size(4), 31 * 31);
  EXPECT_EQ(mmp::leaf_scale_offset(4, 1, 0), 16 * 16);
  auto search = std::make_shared<test::ExhaustiveSearch>();
  struct Case {
    int w, h, block_log, tile, modes;
    mmp::TileMode mode;
    const char* kind;
  };
  for (const Case& c :
       {Case{37, 29, 4, 0, 4, mmp::TileMode::SyncAll, "photo"}, Case{19, 23, 3, 0, 11, mmp::TileMode::SyncAll, "text"},
        Case{40, 36, 5, 0, 1, mmp::TileMode::SyncAll, "photo"}, Case{48, 40, 3, 16, 4, mmp::TileMode::SyncAll, "photo"},
        Case{48, 40, 3, 16, 4, mmp::TileMode::Independent, "random"},
        Case{48, 40, 3, 16, 2, mmp::TileMode::SyncDictionaries, "text"}}) {
    const auto img = plane(c.kind, c.w, c.h, 5);
    mmp::Params p;
    p.lambda = 30;
    p.block_log = c.block_log;
    p.mode_candidates = c.modes;
    p.tile_w = p.tile_h = c.tile;
    p.tile_mode = c.mode;
    const mmp::PlaneResult cpu = mmp::encode_plane(img.data(), c.w, c.h, p);
    p.search = search;
    const int64_t before = search->calls;
    const mmp::PlaneResult other = mmp::encode_plane(img.data(), c.w, c.h, p);
    EXPECT_GT(search->calls, before);
    EXPECT_EQ(cpu.bytes, other.bytes) << c.w << "x" << c.h << " block " << (1 << c.block_log) << " tile " << c.tile;
    EXPECT_EQ(cpu.recon, other.recon);
  }
}

TEST(Mmp, DictionariesCarriedAcrossFrames) {
  const int w = 48, h = 32;
  const auto img = plane("text", w, h, 2);
  mmp::Params p;
  p.lambda = 30;
  mmp::PlaneState enc_state(p), dec_state(p);
  const mmp::PlaneResult first = mmp::encode_plane(img.data(), w, h, p, &enc_state);
  const mmp::PlaneResult second = mmp::encode_plane(img.data(), w, h, p, &enc_state);
  EXPECT_LT(second.bytes.size(),
            first.bytes.size());  // the second frame reuses the first's patterns
  EXPECT_EQ(mmp::decode_plane(first.bytes.data(), first.bytes.size(), w, h, p, &dec_state), first.recon);
  EXPECT_EQ(mmp::decode_plane(second.bytes.data(), second.bytes.size(), w, h, p, &dec_state), second.recon);
}

TEST(Mmp, ContainerCarriesDictionariesWhenAsked) {
  const std::string dir = test::tmp_path("mmp_carry");
  std::filesystem::create_directories(dir);
  FrameSpec s{PixelFormat::YUV420P, 40, 24, {25, 1}};
  HostFrame src(s, false), rec(s, false), back(s, false);
  test::fill_random(src, 3);
  for (int mode = 0; mode < 8; ++mode) {
    const bool carry = (mode & 1) != 0, shared = (mode & 2) != 0, post = (mode & 4) != 0;
    mmp::Params p;
    p.lambda = 40;
    p.carry = carry;
    p.shared_chroma = shared;
    p.post_filter = post;
    p.block_log = 3 + mode % 3;  // 8, 16 and 32 blocks across the combinations
    const std::string f =
        dir + (carry ? "/carry" : "/fresh") + (shared ? "_shared" : "") + (post ? "_post.mmp" : ".mmp");
    std::deque<HostFrame> recs;  // HostFrame does not move
    const std::vector<double> bits = write_frames(f, p, src, 3, recs);
    if (carry)
      EXPECT_LT(bits[2], 0.7 * bits[0]);  // the same picture again: its patterns
                                          // are in the dictionaries
    else
      EXPECT_EQ(bits[2], bits[0]);  // independent frames
    mmp::Reader rd(f);
    EXPECT_EQ(rd.params().carry, carry);
    EXPECT_EQ(rd.params().shared_chroma, shared);
    EXPECT_EQ(rd.params().post_filter, post);
    EXPECT_EQ(rd.params().block_log, p.block_log);
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(rd.read(back));
      EXPECT_TRUE(back.same_pixels(recs[static_cast<size_t>(i)]))
          << "frame " << i << " carry " << carry << " shared " << shared << " post-filter " << post;
    }
    EXPECT_FALSE(rd.read(back));
  }
}

// Params::shared_chroma: Cr starts from the dictionaries and models Cb left. With Cr a copy
// of Cb, Cr's patterns are all in the dictionaries; luma and Cb are coded as before.
// The post-filter (codecs/mmp/postfilter.hpp): identity when off, unit DC gain, nothing
// designed where there is nothing to gain, and on a coarsely coded photo-like plane lower
// error for a few bytes, with the decoder still reproducing the encoder's output exactly.
TEST(Mmp, PostFilterDesignAndApplication) {
  const int w = 37, h = 29;
  const auto img = plane("photo", w, h, 9);
  std::vector<uint8_t> out(img.size());
  mmp::PostFilter off;
  mmp::apply_post_filter(off, img.data(), w, h, out.data());
  EXPECT_EQ(out, img);
  EXPECT_EQ(mmp::post_filter_bits(off), mmp::kPostClasses);
  // Any taps keep a flat plane flat (their weights on neighbour differences vanish).
  mmp::PostFilter f;
  for (int c = 0; c < mmp::kPostClasses; ++c) {
    f.on[c] = true;
    for (int k = 0; k < mmp::kPostTaps; ++k) f.taps[c][k] = (k % 2 ? 1 : -1) * (37 * k + 11 * c) % mmp::kPostTapMax;
  }
  EXPECT_EQ(mmp::post_filter_bits(f), mmp::kPostClasses * (1 + mmp::kPostTaps * mmp::kPostTapBits));
  const auto flat = plane("flat", w, h, 1);
  mmp::apply_post_filter(f, flat.data(), w, h, out.data());
  EXPECT_EQ(out, flat);
  // A perfect reconstruction leaves nothing to gain: every class stays off.
  const mmp::PostFilter none = mmp::design_post_filter(img.data(), img.data(), w, h, 10);
  for (int c = 0; c < mmp::kPostClasses; ++c) EXPECT_FALSE(none.on[c]);
  // The stream carries the taps exactly.
  mmp::RangeEncoder enc;
  mmp::write_post_filter(enc, f);
  const std::vector<uint8_t> bytes = enc.finish();
  mmp::RangeDecoder dec(bytes.data(), bytes.size());
  const mmp::PostFilter g = mmp::read_post_filter(dec);
  EXPECT_FALSE(dec.overrun());
  for (int c = 0; c < mmp::kPostClasses; ++c) {
    EXPECT_EQ(g.on[c], f.on[c]);
    for (int k = 0; k < mmp::kPostTaps; ++k) EXPECT_EQ(g.taps[c][k], f.taps[c][k]);
  }
}

// The post-filter's fast paths (separable activity sums, per-class sums in 32-bit runs, the
// encoder's output from its design pass) against its definition in postfilter.hpp, written
// out plainly: samples and activities clamped at the edges, classes split at the sorted
// sums' quartile ranks. Sizes include 1x1 and planes wider than a 4096-sample run.
namespace postdef {
int at(const std::vector<uint8_t>& r, int w, int h, int x, int y) {
  return r[static_cast<size_t>(std::clamp(y, 0, h - 1)) * w + std::clamp(x, 0, w - 1)];
}
std::vector<uint8_t> apply(const mmp::PostFilter& f, const std::vector<uint8_t>& r, int w, int h) {
  const int off[mmp::kPostTaps][2] = {{0, 1}, {0, 2}, {1, 0}, {2, 0}, {1, 1}, {1, -1}};
  std::vector<int> act(r.size()), sum(r.size());
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const int c = 2 * at(r, w, h, x, y);
      act[static_cast<size_t>(y) * w + x] = std::abs(c - at(r, w, h, x - 1, y) - at(r, w, h, x + 1, y)) +
                                            std::abs(c - at(r, w, h, x, y - 1) - at(r, w, h, x, y + 1));
    }
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int dy = -1; dy <= 1; ++dy)
        for (int dx = -1; dx <= 1; ++dx)
          sum[static_cast<size_t>(y) * w + x] +=
              act[static_cast<size_t>(std::clamp(y + dy, 0, h - 1)) * w + std::clamp(x + dx, 0, w - 1)];
  std::vector<int> sorted = sum;
  std::sort(sorted.begin(), sorted.end());
  int t[3];
  for (int q = 0; q < 3; ++q) t[q] = sorted[sorted.size() * (q + 1) / 4];
  std::vector<uint8_t> out(r.size());
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const size_t i = static_cast<size_t>(y) * w + x;
      const int c = (sum[i] > t[0]) + (sum[i] > t[1]) + (sum[i] > t[2]);
      int acc = 1024 * r[i];
      for (int k = 0; k < mmp::kPostTaps; ++k)
        acc += f.taps[c][k] *
               (at(r, w, h, x + off[k][1], y + off[k][0]) + at(r, w, h, x - off[k][1], y - off[k][0]) - 2 * r[i]);
      out[i] = f.on[c] ? static_cast<uint8_t>(std::clamp((acc + 512) >> 10, 0, 255)) : r[i];
    }
  return out;
}
}  // namespace postdef

TEST(Mmp, PostFilterFastPathsMatchTheDefinition) {
  std::mt19937 rng(29);
  const int sizes[][2] = {{1, 1}, {2, 1}, {1, 3}, {3, 7}, {37, 29}, {203, 117}, {4500, 5}};
  for (const auto& sz : sizes)
    for (const char* kind : {"random", "text", "photo"}) {
      const int w = sz[0], h = sz[1];
      SCOPED_TRACE(std::string(kind) + " " + std::to_string(w) + "x" + std::to_string(h));
      const auto orig = plane(kind, w, h, 3);
      // A coarse reconstruction: quantised, with noise.
      std::vector<uint8_t> rec(orig.size());
      for (size_t i = 0; i < rec.size(); ++i)
        rec[i] = static_cast<uint8_t>(std::clamp(orig[i] / 16 * 16 + 8 + static_cast<int>(rng() % 13) - 6, 0, 255));
      // Any taps, some classes off.
      mmp::PostFilter f;
      for (int c = 0; c < mmp::kPostClasses; ++c) {
        f.on[c] = c != 2;
        for (int k = 0; k < mmp::kPostTaps; ++k)
          f.taps[c][k] = static_cast<int>(rng() % (2 * mmp::kPostTapMax + 1)) - mmp::kPostTapMax;
      }
      std::vector<uint8_t> out(rec.size());
      mmp::apply_post_filter(f, rec.data(), w, h, out.data());
      EXPECT_EQ(out, postdef::apply(f, rec, w, h));
      // The encoder's filter, and its output from the design pass, at lambdas that keep all,
      // some or none of the classes.
      for (const double lambda : {0.0, 40.0, 1e9}) {
        std::vector<uint8_t> designed(rec.size(), 0);
        const mmp::PostFilter g = mmp::design_post_filter(rec.data(), orig.data(), w, h, lambda, designed.data());
        EXPECT_EQ(designed, postdef::apply(g, rec, w, h)) << "lambda " << lambda;
        const mmp::PostFilter g2 = mmp::design_post_filter(rec.data(), orig.data(), w, h, lambda);
        for (int c = 0; c < mmp::kPostClasses; ++c) {
          EXPECT_EQ(g.on[c], g2.on[c]);
          if (lambda >= 1e9) EXPECT_FALSE(g.on[c]);
          for (int k = 0; k < mmp::kPostTaps; ++k) EXPECT_EQ(g.taps[c][k], g2.taps[c][k]);
        }
      }
    }
}

TEST(Mmp, PostFilterLowersErrorAndDecodesExactly) {
  const int w = 96, h = 80;
  const auto img = plane("photo", w, h, 21);
  mmp::Params p;
  p.lambda = 300;  // coarse: large flat segments for the filter to smooth
  p.post_filter = false;
  const mmp::PlaneResult plain = mmp::encode_plane(img.data(), w, h, p);
  p.post_filter = true;
  const mmp::PlaneResult post = mmp::encode_plane(img.data(), w, h, p);
  EXPECT_GT(post.post_filter_classes, 0);
  EXPECT_LT(post.sse, 0.95 * plain.sse);
  // The same blocks, plus the filter's bits (at most 4 x 61 bits and the coder's rounding).
  EXPECT_LE(post.bytes.size(), plain.bytes.size() + 32);
  EXPECT_GE(post.bytes.size(), plain.bytes.size());
  EXPECT_EQ(mmp::decode_plane(post.bytes.data(), post.bytes.size(), w, h, p), post.recon);
  // And without the filter the decoder outputs the unfiltered plane, as before.
  p.post_filter = false;
  EXPECT_EQ(mmp::decode_plane(plain.bytes.data(), plain.bytes.size(), w, h, p), plain.recon);
}

// Params::blocks_coded counts every block of every plane as it is coded, whatever the tiling
// (the CPU paths; Gpu.MmpCountsTheBlocksItCodes checks the GPU's), and ends at frame_blocks().
TEST(Mmp, BlocksCodedCountsEveryBlockOfTheFrame) {
  for (const PixelFormat f : {PixelFormat::GRAY8, PixelFormat::YUV420P, PixelFormat::YUV444P}) {
    const FrameSpec spec{f, 53, 37, {25, 1}};
    HostFrame frame(spec, false);
    test::fill_random(frame, 17);
    for (const int tile : {0, 32})
      for (const mmp::TileMode mode :
           {mmp::TileMode::SyncAll, mmp::TileMode::SyncDictionaries, mmp::TileMode::Independent}) {
        mmp::Params p;
        p.lambda = 60;
        p.block_log = 3;
        p.tile_w = p.tile_h = tile;
        p.tile_mode = mode;
        std::atomic<int64_t> blocks{0};
        p.blocks_coded = &blocks;
        mmp::encode_frame(frame.view(), p, nullptr, nullptr, nullptr);
        // 53x37 luma in 8x8 blocks: 7 x 5; 4:2:0 chroma 27x19: 4 x 3 each.
        const int64_t want = f == PixelFormat::GRAY8 ? 35 : f == PixelFormat::YUV420P ? 35 + 2 * 12 : 3 * 35;
        EXPECT_EQ(mmp::frame_blocks(spec, p), want) << pix_fmt_name(f);
        EXPECT_EQ(blocks.load(), want) << pix_fmt_name(f) << " tile " << tile;
      }
  }
}

TEST(Mmp, CrContinuesCbsDictionariesWhenShared) {
  FrameSpec s{PixelFormat::YUV420P, 64, 48, {25, 1}};
  HostFrame src(s, false);
  test::fill_random(src, 11);
  const ImageView v = src.view();
  for (int y = 0; y < v.ph[1]; ++y) std::memcpy(v.row(2, y), v.row(1, y), static_cast<size_t>(v.pw[1]));
  std::vector<std::vector<uint8_t>> own, shared;
  mmp::Params p;
  p.lambda = 30;
  p.max_dict = 4096;  // room for all Cb teaches (random samples fill 512 elements quickly)
  p.shared_chroma = false;
  mmp::encode_frame(v, p, nullptr, &own);
  p.shared_chroma = true;
  mmp::encode_frame(v, p, nullptr, &shared);
  ASSERT_EQ(own.size(), 3u);
  ASSERT_EQ(shared.size(), 3u);
  EXPECT_EQ(own[0], shared[0]);
  EXPECT_EQ(own[1], shared[1]);
  EXPECT_EQ(own[2], own[1]);  // same plane, fresh state: same bytes
  EXPECT_LT(shared[2].size(), own[2].size() / 2) << shared[2].size() << " vs " << own[2].size();
}

// Fuzzing: mutated .mmp files (bit flips, overwritten, inserted and deleted
// bytes, truncation; header and payload) are decoded or rejected with
// vfp::Error, never a crash, a hang or another exception. VFPIPE_MMP_FUZZ_ITERS
// runs it longer (docs/mmp.md).
TEST(Mmp, FuzzedFilesAreDecodedOrRejected) {
  const std::string dir = test::tmp_path("mmp_fuzz");
  std::filesystem::create_directories(dir);
  FrameSpec s{PixelFormat::YUV420P, 37, 21, {25, 1}};
  HostFrame src(s, false), back(s, false);
  test::fill_random(src, 9);
  std::vector<std::vector<uint8_t>> seeds;
  // Independent / carried frames, 16 / 8 / 32 blocks, untiled and in tiles of each mode;
  // small dictionaries that fill up: replacing their least used elements (carried untiled,
  // and tiled) and stopping (tiled).
  // Variants 10 and 11: wavefront rounds (sync, sync-dict) in tiles of 4 x 3 blocks.
  for (int variant = 0; variant < 12; ++variant) {
    mmp::Params p;
    if (variant >= 7) {
      p.max_dict = 70;
      p.replace_least_used = variant != 8;
    }
    p.lambda = 30;
    p.carry = variant % 2 == 1;
    p.block_log = variant < 2 || variant > 3 ? 4 : variant == 2 ? 3 : 5;
    if (variant > 3 && variant != 7) {
      p.tile_w = p.tile_h = 16;
      p.tile_mode = static_cast<mmp::TileMode>(variant >= 8 ? 2 : variant - 4);
    }
    if (variant >= 10) {
      p.block_log = 3;
      p.tile_w = 32, p.tile_h = 24;
      p.tile_mode = variant == 10 ? mmp::TileMode::SyncAll : mmp::TileMode::SyncDictionaries;
      p.tile_scan = mmp::TileScan::Wavefront;
    }
    const std::string f = dir + "/seed.mmp";
    {
      mmp::Writer wr(f, s, p);
      wr.write(src.view());
      wr.write(src.view());
      wr.close();
    }
    std::ifstream in(f, std::ios::binary);
    seeds.emplace_back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  const char* env = std::getenv("VFPIPE_MMP_FUZZ_ITERS");
  const int iters = env ? std::atoi(env) : 300;
  std::mt19937 rng(2026);
  int rejected = 0;
  for (int it = 0; it < iters; ++it) {
    std::vector<uint8_t> b = seeds[static_cast<size_t>(it) % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !b.empty(); ++e) {
      const size_t at = rng() % b.size();
      switch (rng() % 5) {
        case 0:
          b[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
          break;
        case 1:
          b[at] = static_cast<uint8_t>(rng());
          break;
        case 2:
          b.insert(b.begin() + static_cast<long>(at), static_cast<uint8_t>(rng()));
          break;
        case 3:
          b.erase(b.begin() + static_cast<long>(at));
          break;
        case 4:
          b.resize(at);
          break;
      }
    }
    const std::string f = dir + "/fuzz.mmp";
    std::ofstream(f, std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    const auto t0 = std::chrono::steady_clock::now();
    try {
      mmp::Reader rd(f);
      HostFrame out(rd.spec(), false);
      while (rd.read(out)) {
      }
    } catch (const Error&) {
      ++rejected;
    }
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0) << "iteration " << it;
  }
  EXPECT_GT(rejected, iters / 4);
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
    if (trial % 2)
      bad.resize(rng() % bad.size());
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

// Frames without carry are encoded several at once (--frames-in-flight) and written in
// order: the file is the one frame-by-frame encoding writes, whole batches or not.
TEST(Mmp, FramesInFlightWriteTheSameFile) {
  const std::string bin = VFPIPE_BIN, dir = test::tmp_path("mmp_in_flight");
  std::filesystem::create_directories(dir);
  const std::string y4m = dir + "/in.y4m";
  ASSERT_EQ(test::run_cmd(bin + " run -q -i 'synthetic=size=40x24:frames=5:noise=gauss:sigma=6' -o " + y4m).rc, 0);
  std::string one;
  for (const char* n : {"1", "2", "3", "8"}) {
    const std::string out = dir + "/f" + n + ".mmp";
    const auto r = test::run_cmd(bin + " mmp encode " + y4m + " -o " + out + " --lambda 30 --tile 16 --device cpu " +
                                 "--frames-in-flight " + n);
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_NE(r.out.find("frame 4:"), std::string::npos) << r.out;
    if (one.empty()) one = test::read_file(out);
    EXPECT_EQ(test::read_file(out), one) << "--frames-in-flight " << n;
  }
  // -n stops inside a batch; --carry codes one frame after another whatever is asked.
  auto r = test::run_cmd(bin + " mmp encode " + y4m + " -o " + dir + "/n4.mmp --lambda 30 --device cpu -n 4");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("4 frames"), std::string::npos) << r.out;
  r = test::run_cmd(bin + " mmp encode " + y4m + " -o " + dir + "/c1.mmp --lambda 30 --device cpu --carry");
  ASSERT_EQ(r.rc, 0) << r.out;
  r = test::run_cmd(bin + " mmp encode " + y4m + " -o " + dir + "/c3.mmp --lambda 30 --device cpu --carry " +
                    "--frames-in-flight 3");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(test::read_file(dir + "/c1.mmp"), test::read_file(dir + "/c3.mmp"));
  EXPECT_NE(test::run_cmd(bin + " mmp encode " + y4m + " -o " + dir + "/x.mmp --frames-in-flight 0").rc, 0);
}

// FFmpeg's habit: an existing output is replaced only with -y, and -n never replaces it; the
// error says how. For the .mmp that encode writes, and for decode's PNG and video outputs.
TEST(Mmp, CliKeepsAnExistingOutputUnlessAsked) {
  const std::string bin = VFPIPE_BIN, dir = test::tmp_path("mmp_overwrite");
  std::filesystem::create_directories(dir);
  const std::string y4m = dir + "/in.y4m", mmpf = dir + "/in.mmp", png = dir + "/back.png";
  ASSERT_EQ(test::run_cmd(bin + " run -q -i 'synthetic=size=24x16:frames=1' -o " + y4m).rc, 0);
  const std::string encode = bin + " mmp encode " + y4m + " -o " + mmpf + " --lambda 30 --device cpu";
  ASSERT_EQ(test::run_cmd(encode).rc, 0);
  const std::string first = test::read_file(mmpf);
  auto r = test::run_cmd(encode + " --no-post-filter");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("exists: add -y to overwrite it"), std::string::npos) << r.out;
  r = test::run_cmd(encode + " --no-post-filter -n");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("not overwritten (-n)"), std::string::npos) << r.out;
  EXPECT_EQ(test::read_file(mmpf), first);  // kept both times
  r = test::run_cmd(encode + " --no-post-filter -y");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(test::read_file(mmpf), first);
  // Contradictory, as in ffmpeg: refused by every command that writes an output.
  for (const std::string& cmd :
       {encode, bin + " mmp decode " + mmpf + " -o " + png, bin + " run -i " + y4m + " -o " + dir + "/out.y4m",
        bin + " batch " + y4m + " -o null"}) {
    r = test::run_cmd(cmd + " -y -n");
    EXPECT_EQ(r.rc, 2) << cmd;
    EXPECT_NE(r.out.find("-y and -n (--no-overwrite) contradict each other"), std::string::npos) << cmd << r.out;
  }
  ASSERT_EQ(test::run_cmd(bin + " mmp decode " + mmpf + " -o " + png).rc, 0);
  r = test::run_cmd(bin + " mmp decode " + mmpf + " -o " + png);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("add -y"), std::string::npos) << r.out;
  EXPECT_EQ(test::run_cmd(bin + " mmp decode " + mmpf + " -o " + png + " -y").rc, 0);
}

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
  EXPECT_NE(r.out.find("independent frames"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Cr continues Cb's dictionaries"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("post-filter: on"), std::string::npos) << r.out;
  r = test::run_cmd(bin + " mmp encode " + y4m + " -o " + dir +
                    "/own.mmp --lambda 20 --independent-chroma --no-post-filter -n 1");
  ASSERT_EQ(r.rc, 0) << r.out;
  r = test::run_cmd(bin + " mmp info " + dir + "/own.mmp");
  EXPECT_NE(r.out.find("each plane with dictionaries of its own"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("post-filter: off"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("blocks: 16x16"), std::string::npos) << r.out;
  r = test::run_cmd(bin + " mmp encode " + y4m + " -o " + dir + "/b32.mmp --lambda 20 --block 32 -n 1");
  ASSERT_EQ(r.rc, 0) << r.out;
  r = test::run_cmd(bin + " mmp info " + dir + "/b32.mmp");
  EXPECT_NE(r.out.find("blocks: 32x32"), std::string::npos) << r.out;
  EXPECT_EQ(test::run_cmd(bin + " mmp decode " + dir + "/b32.mmp -o " + dir + "/b32.y4m").rc, 0);
  EXPECT_NE(test::run_cmd(bin + " mmp encode " + y4m + " -o " + dir + "/x.mmp --block 64").rc, 0);
  EXPECT_EQ(test::run_cmd(bin + " mmp decode " + dir + "/own.mmp -o " + dir + "/own.y4m").rc, 0);
  // Tiles from the CLI: the header says so, the file decodes, a bad size is a usage error.
  r = test::run_cmd(bin + " mmp encode " + y4m + " -o " + dir + "/tiled.mmp --lambda 20 --tile 32x16 -n 1");
  ASSERT_EQ(r.rc, 0) << r.out;
  r = test::run_cmd(bin + " mmp info " + dir + "/tiled.mmp");
  EXPECT_NE(r.out.find("tiles: 32x16 (luma samples), sync"), std::string::npos) << r.out;
  EXPECT_EQ(test::run_cmd(bin + " mmp decode " + dir + "/tiled.mmp -o " + dir + "/tiled.y4m").rc, 0);
  r = test::run_cmd(bin + " mmp encode " + y4m + " -o " + dir + "/x.mmp --tile 20");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("multiple of the block size 16"), std::string::npos) << r.out;
  r = test::run_cmd(bin + " mmp encode " + y4m + " -o " + dir + "/carry.mmp --lambda 20 --carry --modes 2");
  ASSERT_EQ(r.rc, 0) << r.out;
  r = test::run_cmd(bin + " mmp info " + dir + "/carry.mmp");
  EXPECT_NE(r.out.find("dictionaries carried across frames"), std::string::npos) << r.out;
  EXPECT_EQ(test::run_cmd(bin + " mmp decode " + dir + "/carry.mmp -o " + dir + "/carry.y4m").rc, 0);
  EXPECT_NE(test::run_cmd(bin + " mmp encode " + y4m + " -o " + dir + "/x.mmp --modes 12").rc,
            0);  // out of range
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
  // Malformed files: every truncation and header byte flipped gives an error or
  // frames, never a crash.
  std::ifstream in(mmpf, std::ios::binary);
  const std::vector<uint8_t> good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t cut = 0; cut < good.size(); cut += std::max<size_t>(1, good.size() / 20)) {
    std::ofstream(dir + "/bad.mmp", std::ios::binary)
        .write(reinterpret_cast<const char*>(good.data()), static_cast<std::streamsize>(cut));
    const auto rr = test::run_cmd(bin + " mmp decode " + dir + "/bad.mmp -o " + dir + "/bad.y4m -y");
    EXPECT_TRUE(rr.rc == 0 || rr.rc == 1) << rr.out;
  }
  for (size_t i = 0; i < 35; ++i) {
    std::vector<uint8_t> bad = good;
    bad[i] ^= 0xFF;
    std::ofstream(dir + "/bad.mmp", std::ios::binary)
        .write(reinterpret_cast<const char*>(bad.data()), static_cast<std::streamsize>(bad.size()));
    const auto rr = test::run_cmd(bin + " mmp info " + dir + "/bad.mmp");
    EXPECT_TRUE(rr.rc == 0 || rr.rc == 1) << "byte " << i << ": " << rr.out;
  }
}

TEST(Mmp, PipelineStageOutputsTheDecodedFrames) {
  for (const std::string carry : {"0", "1"}) {
    const std::string bin = VFPIPE_BIN, dir = test::tmp_path("mmp_stage" + carry);
    std::filesystem::create_directories(dir);
    // With carried dictionaries, also without the post-filter (stage option post_filter=0)
    // and with 8x8 blocks (block=8).
    const std::string post = carry == "1" ? "0" : "1", block = carry == "1" ? "8" : "16";
    auto r = test::run_cmd(bin +
                           " run -i 'synthetic=size=64x48:frames=3:noise=gauss:sigma=3' -f "
                           "'mmp=lambda=30:carry=" +
                           carry + ":post_filter=" + post + ":block=" + block + ":file=" + dir + "/s.mmp' -o " + dir +
                           "/stage.y4m --device cpu");
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_EQ(mmp::Reader(dir + "/s.mmp").params().post_filter, post == "1");
    EXPECT_EQ(1 << mmp::Reader(dir + "/s.mmp").params().block_log, std::stoi(block));
    EXPECT_NE(r.out.find("mmp (lambda 30): 3 frames"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("PSNR"), std::string::npos) << r.out;
    ASSERT_EQ(test::run_cmd(bin + " mmp decode " + dir + "/s.mmp -o " + dir + "/decoded.y4m").rc, 0);
    std::ifstream a(dir + "/stage.y4m", std::ios::binary), b(dir + "/decoded.y4m", std::ios::binary);
    const std::string sa((std::istreambuf_iterator<char>(a)), std::istreambuf_iterator<char>());
    const std::string sb((std::istreambuf_iterator<char>(b)), std::istreambuf_iterator<char>());
    EXPECT_FALSE(sa.empty());
    EXPECT_EQ(sa, sb);  // what the stage passes on is what a decoder of its
                        // bitstream outputs
  }
  const auto bad = test::run_cmd(std::string(VFPIPE_BIN) + " run -i synthetic -f 'mmp=block=12' --device cpu");
  EXPECT_EQ(bad.rc, 2) << bad.out;
  EXPECT_NE(bad.out.find("block=12 (8, 16 or 32)"), std::string::npos) << bad.out;
  const auto bad_unit = test::run_cmd(std::string(VFPIPE_BIN) + " run -i synthetic -f 'mmp=min_unit=12' --device cpu");
  EXPECT_EQ(bad_unit.rc, 2) << bad_unit.out;
  EXPECT_NE(bad_unit.out.find("min_unit=12 (4, 8 or 16)"), std::string::npos) << bad_unit.out;
  // search=cuda where no GPU is usable: one clear error before the first frame (on a GPU
  // host Gpu.MmpStageSearchesOnTheGpu checks the bytes).
  const std::string info = test::run_cmd(std::string(VFPIPE_BIN) + " info").out;
  if (info.find("GPU: none usable") != std::string::npos || info.find("CUDA backend: not built") != std::string::npos) {
    const auto no_gpu = test::run_cmd(std::string(VFPIPE_BIN) + " run -i synthetic=frames=2 -f 'mmp=search=cuda'");
    EXPECT_EQ(no_gpu.rc, 2) << no_gpu.out;
    EXPECT_NE(no_gpu.out.find("search"), std::string::npos) << no_gpu.out;
    EXPECT_NE(no_gpu.out.find("CUDA"), std::string::npos) << no_gpu.out;
  }
}

// The stage's modes=, dict=, min_unit= are mmp encode's --modes, --dict, --min-unit: the same
// bitstream for the same input; fewer modes, a smaller dictionary or larger units give another file, which decodes to
// the frames the stage passed on (the decoder fills its dictionaries as far as the
// header's size, as the encoder did); out of range, a clear error naming the option.
TEST(Mmp, StageModesAndDictAreTheEncoders) {
  const std::string bin = VFPIPE_BIN, dir = test::tmp_path("mmp_stage_modes");
  std::filesystem::create_directories(dir);
  ASSERT_EQ(test::run_cmd(bin + " run -i 'synthetic=size=48x32:frames=2:noise=gauss:sigma=4' -o " + dir +
                          "/in.y4m -y --device cpu")
                .rc,
            0);
  const auto read = test::read_file;
  struct Setting {
    std::string name, stage, cli;
  };
  for (const Setting& s :
       {Setting{"default", "", ""}, Setting{"modes1", ":modes=1", " --modes 1"},
        Setting{"dict72", ":dict=72", " --dict 72"},
        Setting{"stop", ":dict=72:dict_full=stop", " --dict 72 --dict-full stop"},
        Setting{"wavefront", ":tile=32x32:tile_scan=wavefront", " --tile 32x32 --tile-scan wavefront"},
        Setting{"unit16", ":min_unit=16", " --min-unit 16"}}) {
    const std::string stream = dir + "/s_" + s.name + ".mmp";
    const auto st = test::run_cmd(bin + " run -i " + dir + "/in.y4m -f 'mmp=lambda=30" + s.stage + ":file=" + stream +
                                  "' -o " + dir + "/rec_" + s.name + ".y4m -y --device cpu");
    ASSERT_EQ(st.rc, 0) << st.out;
    if (!s.stage.empty()) {  // the stage's label names what it traded
      std::string traded = s.stage.substr(1);
      for (size_t at; (at = traded.find(':')) != std::string::npos;) traded.replace(at, 1, ", ");
      EXPECT_NE(st.out.find("mmp(lambda=30, " + traded), std::string::npos) << st.out;
    }
    const auto en = test::run_cmd(bin + " mmp encode " + dir + "/in.y4m -o " + dir + "/e_" + s.name +
                                  ".mmp -y --lambda 30" + s.cli + " --device cpu");
    ASSERT_EQ(en.rc, 0) << en.out;
    EXPECT_EQ(read(stream), read(dir + "/e_" + s.name + ".mmp")) << s.name;
    const auto de = test::run_cmd(bin + " mmp decode " + stream + " -o " + dir + "/dec_" + s.name + ".y4m -y");
    ASSERT_EQ(de.rc, 0) << de.out;
    EXPECT_EQ(read(dir + "/dec_" + s.name + ".y4m"), read(dir + "/rec_" + s.name + ".y4m")) << s.name;
  }
  EXPECT_NE(read(dir + "/s_modes1.mmp"), read(dir + "/s_default.mmp"));
  EXPECT_NE(read(dir + "/s_dict72.mmp"), read(dir + "/s_default.mmp"));
  EXPECT_NE(read(dir + "/s_unit16.mmp"), read(dir + "/s_default.mmp"));
  const auto info = test::run_cmd(bin + " mmp info " + dir + "/s_dict72.mmp");
  EXPECT_NE(info.out.find("72 dictionary elements per scale (a full scale replaces its least used)"), std::string::npos)
      << info.out;
  EXPECT_NE(read(dir + "/s_stop.mmp"), read(dir + "/s_dict72.mmp"));
  const auto info_s = test::run_cmd(bin + " mmp info " + dir + "/s_stop.mmp");
  EXPECT_NE(info_s.out.find("72 dictionary elements per scale (a full scale takes no more)"), std::string::npos)
      << info_s.out;
  const auto info_w = test::run_cmd(bin + " mmp info " + dir + "/s_wavefront.mmp");
  EXPECT_NE(info_w.out.find("tiles: 32x32 (luma samples), sync (dictionaries and models shared, updated in rounds), "
                            "wavefront rounds"),
            std::string::npos)
      << info_w.out;
  for (const std::string bad :
       {"modes=12", "dict=32", "dict=5000", "dict_full=lru", "tile_scan=zigzag", "tile_scan=wavefront",
        "tile=32:tile_mode=independent:tile_scan=wavefront", "gpus=0", "gpus=two", "gpus=2:carry=1"}) {
    const auto r = test::run_cmd(bin + " run -i synthetic -f 'mmp=" + bad + "' --device cpu");
    EXPECT_EQ(r.rc, 2) << r.out;
    const std::string last = bad.substr(bad.rfind(':') + 1);
    EXPECT_NE(r.out.find(last.substr(0, last.find('='))), std::string::npos) << r.out;
  }
  // gpus=N applies on the CUDA backend: the CPU backend says so and writes the same frames.
  const auto two = test::run_cmd(bin + " run -i " + dir + "/in.y4m -f 'mmp=lambda=40:tile=32:gpus=2' --device cpu -o " +
                                 dir + "/gpus2.y4m");
  ASSERT_EQ(two.rc, 0) << two.out;
  EXPECT_NE(two.out.find("gpus=2 is for the CUDA backend"), std::string::npos) << two.out;
  ASSERT_EQ(test::run_cmd(bin + " run -q -i " + dir + "/in.y4m -f 'mmp=lambda=40:tile=32' --device cpu -o " + dir +
                          "/gpus1.y4m")
                .rc,
            0);
  EXPECT_EQ(read(dir + "/gpus1.y4m"), read(dir + "/gpus2.y4m"));
  // mmp encode --gpus with the search on the CPU: a warning, the same bytes.
  const auto enc = test::run_cmd(bin + " mmp encode " + dir + "/in.y4m -o " + dir + "/g.mmp -y --tile 32 --gpus all " +
                                 "--device cpu");
  ASSERT_EQ(enc.rc, 0) << enc.out;
  EXPECT_NE(enc.out.find("--gpus all: the search runs on the CPU"), std::string::npos) << enc.out;
  ASSERT_EQ(test::run_cmd(bin + " mmp encode " + dir + "/in.y4m -o " + dir + "/g1.mmp -y --tile 32 --device cpu").rc,
            0);
  EXPECT_EQ(read(dir + "/g.mmp"), read(dir + "/g1.mmp"));
  const auto cli = test::run_cmd(bin + " mmp encode " + dir + "/in.y4m -o " + dir + "/x.mmp -y --dict 63");
  EXPECT_NE(cli.rc, 0) << cli.out;
  EXPECT_NE(cli.out.find("--dict"), std::string::npos) << cli.out;
  const auto untiled_wavefront =
      test::run_cmd(bin + " mmp encode " + dir + "/in.y4m -o " + dir + "/x.mmp -y --tile-scan wavefront");
  EXPECT_EQ(untiled_wavefront.rc, 2) << untiled_wavefront.out;
  EXPECT_NE(untiled_wavefront.out.find("wavefront"), std::string::npos) << untiled_wavefront.out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/x.mmp"));
}

// The stage leaves a note per frame in the run's records (the HUD's line): bits, bpp, PSNR.
TEST(Mmp, StageNotesEachFramesBits) {
  auto src = open_source("synthetic=size=40x24:frames=2:format=gray:noise=gauss:sigma=5", SourceOptions{});
  Chain chain = Chain::build(build_stages("mmp=lambda=30:tile=16x16:tile_mode=sync-dict"), src->spec(), {});
  NullSink sink;
  sink.open(chain.output());
  const RunResult r = run_pipeline(*src, chain, sink, EngineConfig{});
  ASSERT_EQ(r.report.frames.size(), 2u);
  for (const auto& f : r.report.frames) {
    ASSERT_EQ(f.notes.size(), 1u);
    EXPECT_EQ(f.notes[0].rfind("MMP ", 0), 0u) << f.notes[0];
    EXPECT_NE(f.notes[0].find(" DB"), std::string::npos) << f.notes[0];
  }
}

// The stage's numbers per frame (StageContext::metrics) reach the profile: its bits, as the
// encoder counts them, and its time; no GPU time on the CPU.
TEST(Mmp, StageMetricsReachTheProfile) {
  auto src = open_source("synthetic=size=40x24:frames=3:format=gray:noise=gauss:sigma=5", SourceOptions{});
  Chain chain = Chain::build(build_stages("mmp=lambda=30:block=8"), src->spec(), {});
  NullSink sink;
  sink.open(chain.output());
  const RunResult r = run_pipeline(*src, chain, sink, EngineConfig{});
  ASSERT_FALSE(r.error);
  ASSERT_EQ(r.report.frames.size(), 3u);
  const ProfileSummary p = summarize_profile(r.report);
  ASSERT_EQ(p.metrics.size(), 2u);
  EXPECT_EQ(p.metrics[0].name, "mmp kbits");
  EXPECT_EQ(p.metrics[1].name, "mmp encode (ms)");
  EXPECT_EQ(p.metrics[0].ms.count, p.counted);
  for (const auto& f : r.report.frames) {
    ASSERT_EQ(f.metrics.size(), 2u);
    const double kbits = f.metrics[0].second;
    EXPECT_GT(kbits, 0.0);
    // The note says the same bits ("MMP <bits> BITS ...").
    EXPECT_NEAR(std::stod(f.notes[0].substr(4)), kbits * 1000, 0.5) << f.notes[0];
    EXPECT_GT(f.metrics[1].second, 0.0);
  }
  EXPECT_NE(profile_text(r.report, p).find("mmp kbits"), std::string::npos);
  EXPECT_TRUE(profile_json(r.report, p, false)["profile"]["stage_metrics"].is_array());
}

// The encoder refuses a lambda that is not a finite number >= 0 (a NaN cost would make the
// search pick no candidate): the library check behind the CLI's.
TEST(Mmp, NonFiniteLambdaIsRefused) {
  std::vector<uint8_t> img(16 * 16, 128);
  for (double l : {std::nan(""), -std::nan(""), HUGE_VAL, -1.0}) {
    mmp::Params p;
    p.lambda = l;
    EXPECT_THROW(mmp::encode_plane(img.data(), 16, 16, p, nullptr), Error) << l;
  }
}

// A Reader whose constructor throws (not an .mmp file, a bad header) closes its file: the
// open descriptors do not grow (the fuzzer ran the process out of them).
TEST(Mmp, FailedOpenLeaksNothing) {
  const std::string bad = test::tmp_path("bad.mmp"), badsize = test::tmp_path("badsize.mmp");
  std::ofstream(bad) << "not an mmp file at all, but long enough for a header read";
  std::string h(64, '\0');
  h.replace(0, 4, "VMMP");
  std::ofstream(badsize, std::ios::binary) << h;
  const size_t before = test::open_descriptor_count();
  for (int i = 0; i < 50; ++i)
    for (const auto& p : {bad, badsize}) EXPECT_THROW(mmp::Reader r(p), Error) << p;
  EXPECT_EQ(test::open_descriptor_count(), before);
  std::remove(bad.c_str());
  std::remove(badsize.c_str());
}

// A header that claims a frame its data cannot hold is rejected when the file is opened,
// before anything frame-sized is allocated (a 16384x16384 claim in a few hundred bytes).
TEST(Mmp, HeaderClaimingMoreThanTheDataHoldsIsRejected) {
  const std::string ok = test::tmp_path("small.mmp"), big = test::tmp_path("claims_big.mmp");
  {
    FrameSpec s{PixelFormat::GRAY8, 64, 48, {25, 1}};
    HostFrame f(s, false);
    test::fill_random(f, 5);
    mmp::Writer w(ok, s, mmp::Params{});
    w.write(f.view());
    w.close();
  }
  std::ifstream in(ok, std::ios::binary);
  std::string d((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NO_THROW(mmp::Reader r(ok));
  for (int i : {6, 10}) d.replace(static_cast<size_t>(i), 4, std::string("\x00\x40\x00\x00", 4));  // 16384
  std::ofstream(big, std::ios::binary) << d;
  try {
    mmp::Reader r(big);
    FAIL() << "a 16384x16384 frame in " << d.size() << " bytes was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot hold a 16384x16384 frame"), std::string::npos) << e.what();
  }
  for (const auto& p : {ok, big}) std::remove(p.c_str());
}

// Non-square pixels are recorded (flag bit 6 and 8 bytes after the header, tiled too) and
// come back from the reader; square and unknown ones leave the file as it was; a bad
// ratio is rejected.
TEST(Mmp, PixelAspectIsRecordedOnlyWhenNotSquare) {
  const std::string path = test::tmp_path("aspect.mmp");
  const auto write = [&](Rational sar, bool tiled) {
    FrameSpec s{PixelFormat::YUV420P, 48, 32, {25, 1}};
    s.sar = sar;
    HostFrame f(s, false);
    test::fill_random(f, 9);
    mmp::Params p;
    p.lambda = 40;
    if (tiled) p.tile_w = p.tile_h = 32;
    mmp::Writer w(path, s, p);
    w.write(f.view());
    w.close();
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  for (bool tiled : {false, true}) {
    const std::string square = write({1, 1}, tiled), unknown = write({0, 1}, tiled), wide = write({32, 27}, tiled);
    EXPECT_EQ(square, unknown);
    EXPECT_EQ(square[34] & 64, 0);
    ASSERT_EQ(wide.size(), square.size() + 8);
    EXPECT_EQ(wide[34] & 64, 64);
    {
      mmp::Reader r(path);
      EXPECT_EQ(r.spec().sar.num, 32);
      EXPECT_EQ(r.spec().sar.den, 27);
      HostFrame f(r.spec(), false);
      EXPECT_TRUE(r.read(f));
    }
    // The ratio's terms: 0 or above 65535 is a corrupt header.
    const size_t at = tiled ? 44 : 35;  // right after the header
    for (const std::string& bad : {std::string("\0\0\0\0", 4), std::string("\0\0\1\0", 4)}) {
      std::string d = wide;
      d.replace(at, 4, bad);
      std::ofstream(path, std::ios::binary) << d;
      try {
        mmp::Reader r(path);
        FAIL() << "a bad pixel aspect was accepted";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("bad pixel aspect ratio"), std::string::npos) << e.what();
      }
    }
  }
  std::remove(path.c_str());
}

// Tiles (docs/mmp.md, "Tiles"): every mode decodes to the encoder's reconstruction at odd
// sizes, every block size, with and without the post-filter; tiles smaller than the plane
// cut it into the expected grid.
TEST(Mmp, TiledPlanesDecodeExactlyInEveryMode) {
  const std::pair<int, int> sizes[] = {{1, 1}, {3, 7}, {37, 21}, {70, 45}, {64, 64}};
  int cases = 0;
  for (mmp::TileMode mode : {mmp::TileMode::Independent, mmp::TileMode::SyncDictionaries, mmp::TileMode::SyncAll})
    for (const auto& [w, h] : sizes)
      for (int bl = 3; bl <= 5; ++bl) {
        const auto img = plane((w + bl) % 2 ? "photo" : "text", w, h, static_cast<uint32_t>(w * 7 + bl));
        mmp::Params p;
        p.lambda = 25;
        p.block_log = bl;
        p.tile_mode = mode;
        p.post_filter = (w + h + bl) % 2 == 0;
        p.tile_w = 1 << bl;                        // one block wide
        p.tile_h = (bl == 5 ? 1 : 2) * (1 << bl);  // and one or two high
        const mmp::PlaneResult r = mmp::encode_plane(img.data(), w, h, p);
        const int B = 1 << bl, W = (w + B - 1) / B * B, H = (h + B - 1) / B * B;
        EXPECT_EQ(r.tiles, (W / p.tile_w) * ((H + p.tile_h - 1) / p.tile_h));
        ASSERT_EQ(mmp::decode_plane(r.bytes.data(), r.bytes.size(), w, h, p), r.recon)
            << mmp::tile_mode_name(mode) << " " << w << "x" << h << " block " << B;
        ++cases;
      }
  EXPECT_EQ(cases, 45);
}

// The tiles of a round run in parallel; what they write and decode does not depend on how
// many threads run them (one thread codes the tiles one after another, in order).
TEST(Mmp, TiledBytesDoNotDependOnTheThreadCount) {
  const int w = 96, h = 80;
  const auto img = plane("photo", w, h, 11);
  for (mmp::TileMode mode : {mmp::TileMode::Independent, mmp::TileMode::SyncDictionaries, mmp::TileMode::SyncAll}) {
    mmp::Params p;
    p.lambda = 20;
    p.tile_mode = mode;
    p.tile_w = p.tile_h = 32;
    set_cpu_threads(1);
    const mmp::PlaneResult one = mmp::encode_plane(img.data(), w, h, p);
    const auto one_back = mmp::decode_plane(one.bytes.data(), one.bytes.size(), w, h, p);
    set_cpu_threads(4);
    const mmp::PlaneResult four = mmp::encode_plane(img.data(), w, h, p);
    const auto four_back = mmp::decode_plane(one.bytes.data(), one.bytes.size(), w, h, p);
    set_cpu_threads(0);
    EXPECT_EQ(one.bytes, four.bytes) << mmp::tile_mode_name(mode);
    EXPECT_EQ(one_back, one.recon);
    EXPECT_EQ(four_back, one.recon);
    EXPECT_EQ(one.tiles, 9);
  }
}

// Wavefront rounds (docs/mmp.md, "Wavefront rounds"): in both synchronized modes, at odd
// sizes, every block size and tiles of several blocks each way, the decoder gives the
// encoder's reconstruction, whatever the thread count, with carried state and the
// exhaustive backend's bytes. Tiles one block high have the raster order's rounds, and so
// its bytes; taller ones code otherwise.
// The encoder's smallest prediction unit (Params::min_unit, an encoder setting): no unit
// below it, the same decoder, the same bytes from every backend and thread count; 4 (the
// default) does use 4x4 units on this input, so the setting is what removes them.
TEST(Mmp, SmallestUnitLimitsThePredictionTree) {
  auto search = std::make_shared<test::ExhaustiveSearch>();
  const auto img = plane("photo", 70, 45, 5);
  for (int bl = 3; bl <= 5; ++bl)
    for (int min_unit : {4, 8, 16})
      for (int tile : {0, 32}) {
        mmp::Params p;
        p.lambda = 2;
        p.block_log = bl;
        p.min_unit = min_unit;
        p.tile_w = p.tile_h = tile;
        const std::string what = "block " + std::to_string(1 << bl) + " min unit " + std::to_string(min_unit) +
                                 " tile " + std::to_string(tile);
        const mmp::PlaneResult r = mmp::encode_plane(img.data(), 70, 45, p);
        ASSERT_EQ(mmp::decode_plane(r.bytes.data(), r.bytes.size(), 70, 45, p), r.recon) << what;
        // unit_sizes: 32x32, 16x16, 8x8, 4x4
        for (int k = 0; k < 4; ++k)
          if ((32 >> k) < std::min(min_unit, 1 << bl)) EXPECT_EQ(r.unit_sizes[k], 0) << what << " size " << (32 >> k);
        if (min_unit == 4) EXPECT_GT(r.unit_sizes[3], 0) << what;
        if (min_unit >= (1 << bl)) EXPECT_EQ(r.unit_sizes[5 - bl], r.blocks) << what;  // one unit a block
        set_cpu_threads(1);
        EXPECT_EQ(mmp::encode_plane(img.data(), 70, 45, p).bytes, r.bytes) << what;
        set_cpu_threads(0);
        mmp::Params q = p;
        q.search = search;
        EXPECT_EQ(mmp::encode_plane(img.data(), 70, 45, q).bytes, r.bytes) << what;
      }
}

TEST(Mmp, WavefrontRoundsDecodeExactly) {
  auto search = std::make_shared<test::ExhaustiveSearch>();
  const std::pair<int, int> sizes[] = {{1, 1}, {3, 7}, {37, 21}, {70, 45}, {100, 90}};
  int cases = 0, differ = 0;
  for (mmp::TileMode mode : {mmp::TileMode::SyncDictionaries, mmp::TileMode::SyncAll})
    for (const auto& [w, h] : sizes)
      for (int bl = 3; bl <= 5; ++bl) {
        const auto img = plane((w + bl) % 2 ? "photo" : "text", w, h, static_cast<uint32_t>(w * 3 + bl));
        mmp::Params p;
        p.lambda = 25;
        p.block_log = bl;
        p.tile_mode = mode;
        p.tile_scan = mmp::TileScan::Wavefront;
        p.max_dict = bl == 4 ? 72 : 512;  // a dictionary that fills up and replaces, too
        p.post_filter = (w + bl) % 2 == 0;
        p.tile_w = 4 << bl, p.tile_h = 3 << bl;  // 4 x 3 blocks: up to 2 blocks a round per tile
        const std::string what = std::string(mmp::tile_mode_name(mode)) + " " + std::to_string(w) + "x" +
                                 std::to_string(h) + " block " + std::to_string(1 << bl);
        mmp::PlaneState enc(p), dec(p), one_state(p), ex_state(p);
        for (int frame = 0; frame < 2; ++frame) {  // the second continues the first's state
          const mmp::PlaneResult r = mmp::encode_plane(img.data(), w, h, p, &enc);
          ASSERT_EQ(mmp::decode_plane(r.bytes.data(), r.bytes.size(), w, h, p, &dec), r.recon) << what;
          set_cpu_threads(1);
          const mmp::PlaneResult one = mmp::encode_plane(img.data(), w, h, p, &one_state);
          set_cpu_threads(0);
          EXPECT_EQ(one.bytes, r.bytes) << what;
          if (w * h <= 70 * 45) {  // (slow)
            mmp::Params q = p;
            q.search = search;
            EXPECT_EQ(mmp::encode_plane(img.data(), w, h, q, &ex_state).bytes, r.bytes) << what;
          }
        }
        mmp::Params raster = p;
        raster.tile_scan = mmp::TileScan::Raster;
        const mmp::PlaneResult wf = mmp::encode_plane(img.data(), w, h, p);
        const mmp::PlaneResult ra = mmp::encode_plane(img.data(), w, h, raster);
        if (h <= (1 << bl)) EXPECT_EQ(wf.bytes, ra.bytes) << what;  // one block high: the same rounds
        if (wf.bytes != ra.bytes) ++differ;
        ++cases;
      }
  EXPECT_EQ(cases, 30);
  EXPECT_GE(differ, 8);  // the taller planes (2 sizes x 3 blocks, 2 modes; some at 32x32 blocks coincide)
}

// One block row of tiles per round in the wavefront, two block columns apart: the plane's
// rounds are fewer than its tiles' blocks, and the rounds' blocks are coded in parallel.
TEST(Mmp, WavefrontBytesDoNotDependOnTheThreadCount) {
  const int w = 192, h = 160;
  const auto img = plane("photo", w, h, 12);
  for (mmp::TileMode mode : {mmp::TileMode::SyncDictionaries, mmp::TileMode::SyncAll}) {
    mmp::Params p;
    p.lambda = 20;
    p.block_log = 3;
    p.tile_mode = mode;
    p.tile_scan = mmp::TileScan::Wavefront;
    p.tile_w = p.tile_h = 64;
    set_cpu_threads(1);
    const mmp::PlaneResult one = mmp::encode_plane(img.data(), w, h, p);
    set_cpu_threads(4);
    const mmp::PlaneResult four = mmp::encode_plane(img.data(), w, h, p);
    const auto back = mmp::decode_plane(one.bytes.data(), one.bytes.size(), w, h, p);
    set_cpu_threads(0);
    EXPECT_EQ(one.bytes, four.bytes) << mmp::tile_mode_name(mode);
    EXPECT_EQ(back, one.recon);
    EXPECT_EQ(one.tiles, 9);
    EXPECT_EQ(one.blocks, 24 * 20);
  }
}

// What the modes share shows in the cost: on a plane whose pattern repeats across tiles,
// shared dictionaries and models (sync) code it for less J = SSE + lambda * bits than
// dictionaries only (sync-dict), and both for less than independent tiles; untiled is the
// least.
TEST(Mmp, SharingTilesCostLessThanIndependentTiles) {
  const int w = 128, h = 128;
  const auto img = plane("text", w, h, 5);
  const auto cost = [&](int tile, mmp::TileMode mode) {
    mmp::Params p;
    p.lambda = 30;
    p.tile_w = p.tile_h = tile;
    p.tile_mode = mode;
    const mmp::PlaneResult r = mmp::encode_plane(img.data(), w, h, p);
    return r.sse + p.lambda * 8.0 * static_cast<double>(r.bytes.size());
  };
  const double untiled = cost(0, mmp::TileMode::SyncAll), sync = cost(32, mmp::TileMode::SyncAll);
  const double dict = cost(32, mmp::TileMode::SyncDictionaries), own = cost(32, mmp::TileMode::Independent);
  std::printf("untiled %.0f sync %.0f sync-dict %.0f independent %.0f\n", untiled, sync, dict, own);
  EXPECT_LT(untiled, sync);
  EXPECT_LT(sync, dict);
  EXPECT_LT(dict, own);
}

TEST(Mmp, TileSizesAndModesAreParsedAndChecked) {
  mmp::Params p;
  mmp::parse_tile_size("128x64", &p);
  EXPECT_EQ(p.tile_w, 128);
  EXPECT_EQ(p.tile_h, 64);
  mmp::parse_tile_size("96", &p);
  EXPECT_EQ(p.tile_w, 96);
  EXPECT_EQ(p.tile_h, 96);
  mmp::check_tiles(p);
  mmp::parse_tile_size("0", &p);
  EXPECT_FALSE(p.tiled());
  for (const char* bad : {"x", "12x", "-16", "16x0", "abc", "16x16x16"})
    EXPECT_THROW(mmp::parse_tile_size(bad, &p), Error) << bad;
  p.tile_w = 24, p.tile_h = 16;  // not a multiple of 16
  EXPECT_THROW(mmp::check_tiles(p), Error);
  p.block_log = 3;
  mmp::check_tiles(p);
  mmp::TileMode m;
  EXPECT_TRUE(mmp::parse_tile_mode("sync-dict", &m));
  EXPECT_EQ(m, mmp::TileMode::SyncDictionaries);
  EXPECT_FALSE(mmp::parse_tile_mode("rounds", &m));
  mmp::TileScan scan;
  EXPECT_TRUE(mmp::parse_tile_scan("wavefront", &scan));
  EXPECT_EQ(scan, mmp::TileScan::Wavefront);
  EXPECT_TRUE(mmp::parse_tile_scan("raster", &scan));
  EXPECT_EQ(scan, mmp::TileScan::Raster);
  EXPECT_FALSE(mmp::parse_tile_scan("zigzag", &scan));
  // A wavefront orders synchronized tiles' rounds: untiled planes and independent tiles have none.
  mmp::Params wf;
  wf.tile_scan = mmp::TileScan::Wavefront;
  EXPECT_THROW(mmp::check_tiles(wf), Error);
  wf.tile_w = wf.tile_h = 64;
  mmp::check_tiles(wf);
  wf.tile_mode = mmp::TileMode::Independent;
  EXPECT_THROW(mmp::check_tiles(wf), Error);
  // Chroma tiles: the luma size shifted by the subsampling, rounded up to whole blocks.
  EXPECT_EQ(mmp::plane_tile_size(128, 1, 4), 64);
  EXPECT_EQ(mmp::plane_tile_size(16, 1, 4), 16);
  EXPECT_EQ(mmp::plane_tile_size(48, 1, 4), 32);
  EXPECT_EQ(mmp::plane_tile_size(128, 0, 4), 128);
  // Tiles with state of their own are limited per plane.
  std::vector<uint8_t> img(1024 * 1024, 9);
  mmp::Params many;
  many.tile_w = many.tile_h = 16;
  many.tile_mode = mmp::TileMode::Independent;
  EXPECT_THROW(mmp::encode_plane(img.data(), 1024, 1024, many), Error);
}

// A corrupt tile table (a length past the payload, or too short for its tile's blocks),
// truncation or flipped bits in tiled streams give an error, never a crash.
TEST(Mmp, CorruptTileTablesAreRejected) {
  const int w = 64, h = 48;
  const auto img = plane("photo", w, h, 8);
  for (mmp::TileMode mode : {mmp::TileMode::Independent, mmp::TileMode::SyncAll}) {
    mmp::Params p;
    p.lambda = 20;
    p.tile_w = p.tile_h = 32;
    p.tile_mode = mode;
    const mmp::PlaneResult r = mmp::encode_plane(img.data(), w, h, p);
    ASSERT_EQ(r.tiles, 4);
    auto decode = [&](const std::vector<uint8_t>& b) { return mmp::decode_plane(b.data(), b.size(), w, h, p); };
    ASSERT_EQ(decode(r.bytes), r.recon);
    std::vector<uint8_t> bad = r.bytes;
    bad[0] = bad[1] = bad[2] = 0xFF, bad[3] = 0x7F;  // tile 0 longer than the payload
    EXPECT_THROW(decode(bad), Error);
    bad[3] = 0xFF;  // a byte count that does not end
    EXPECT_THROW(decode(bad), Error);
    bad = r.bytes;
    bad[0] = 0;  // tile 0 empty
    EXPECT_THROW(decode(bad), Error);
    bad.assign(r.bytes.begin(), r.bytes.begin() + 3);  // cut inside the table
    EXPECT_THROW(decode(bad), Error);
    std::mt19937 rng(3);
    int rejected = 0;
    for (int trial = 0; trial < 60; ++trial) {
      bad = r.bytes;
      if (trial % 2)
        bad.resize(rng() % bad.size());
      else
        bad[rng() % bad.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
      try {
        EXPECT_EQ(decode(bad).size(), img.size());
      } catch (const Error& e) {
        ++rejected;
        EXPECT_NE(std::string(e.what()).find("MMP"), std::string::npos);
      }
    }
    EXPECT_GE(rejected, 30);
  }
}

// The tile header's mode byte: bits 0-1 the mode, bit 2 the wavefront; a wavefront of
// independent tiles or any other bit is rejected with a clear error.
TEST(Mmp, TileModeBytesAreChecked) {
  const std::string dir = test::tmp_path("mmp_mode_byte");
  std::filesystem::create_directories(dir);
  FrameSpec s{PixelFormat::GRAY8, 40, 24, {25, 1}};
  HostFrame src(s, false), back(s, false);
  test::fill_random(src, 6);
  mmp::Params p;
  p.lambda = 30;
  p.block_log = 3;
  p.tile_w = p.tile_h = 32;
  p.tile_scan = mmp::TileScan::Wavefront;
  const std::string f = dir + "/w.mmp";
  {
    mmp::Writer wr(f, s, p);
    wr.write(src.view());
  }
  std::string bytes = test::read_file(f);
  const auto write = [&](const std::string& b) { std::ofstream(f, std::ios::binary) << b; };
  constexpr size_t kModeByte = 35 + 8;  // after the fixed header and the tile size
  ASSERT_GT(bytes.size(), kModeByte);
  EXPECT_EQ(bytes[kModeByte], 2 | 4);  // sync, wavefront
  for (const int bad : {4, 3, 8, 0x86}) {
    std::string b = bytes;
    b[kModeByte] = static_cast<char>(bad);
    write(b);
    try {
      mmp::Reader rd(f);
      ADD_FAILURE() << "mode byte " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("tile"), std::string::npos) << e.what();
    }
  }
  bytes[kModeByte] = 1 | 4;  // sync-dict, wavefront: another valid stream, decoded without a crash
  write(bytes);
  try {
    mmp::Reader rd(f);
    EXPECT_EQ(rd.params().tile_mode, mmp::TileMode::SyncDictionaries);
    EXPECT_EQ(rd.params().tile_scan, mmp::TileScan::Wavefront);
    rd.read(back);
  } catch (const Error&) {  // its data was written for shared models: an error is as good
  }
}

// The container records the tile grid and mode (version 3); colour planes get chroma tiles
// scaled by the subsampling; carried state keeps the tiles' dictionaries across frames.
TEST(Mmp, TiledContainerRoundTripsWithCarryAndColour) {
  const std::string dir = test::tmp_path("mmp_tiles");
  std::filesystem::create_directories(dir);
  for (PixelFormat fmt : {PixelFormat::YUV420P, PixelFormat::GRAY8, PixelFormat::YUV444P}) {
    FrameSpec s{fmt, 70, 50, {25, 1}};
    HostFrame src(s, false), back(s, false);
    test::fill_random(src, 4);
    mmp::Params p;
    p.lambda = 30;
    p.carry = fmt == PixelFormat::YUV420P;
    p.max_dict = 4096;  // room for all the first frame teaches (random samples)
    p.tile_w = 32, p.tile_h = 48;
    p.tile_mode = fmt == PixelFormat::GRAY8 ? mmp::TileMode::Independent : mmp::TileMode::SyncAll;
    if (fmt == PixelFormat::YUV444P) p.tile_scan = mmp::TileScan::Wavefront;
    const std::string f = dir + "/t.mmp";
    std::deque<HostFrame> recs;  // HostFrame does not move
    const std::vector<double> bits = write_frames(f, p, src, 3, recs);
    if (p.carry) EXPECT_LT(bits[2], 0.7 * bits[0]);
    mmp::Reader rd(f);
    EXPECT_EQ(rd.params().tile_w, 32);
    EXPECT_EQ(rd.params().tile_h, 48);
    EXPECT_EQ(rd.params().tile_mode, p.tile_mode);
    EXPECT_EQ(rd.params().tile_scan, p.tile_scan);
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(rd.read(back));
      EXPECT_TRUE(back.same_pixels(recs[static_cast<size_t>(i)])) << pix_fmt_name(fmt) << " frame " << i;
    }
    EXPECT_FALSE(rd.read(back));
  }
}

// Full scales replacing their least used element (codecs/mmp/dictionary.hpp), against the
// rule written out plainly: 1x1 elements (one scale), random new values and random uses,
// every index's value, uses and the change log compared after every lesson.
TEST(Mmp, FullScaleReplacesItsLeastUsedOldEnoughElement) {
  for (int max : {64, 65, 100, 300}) {
    mmp::Dictionary d(max, 0, true);
    struct Elem {
      int value;
      uint32_t uses;
      uint64_t born;
    };
    std::vector<Elem> ref;
    uint64_t clock = 0;
    std::vector<int> log;  // indices written, in order
    const uint64_t window = static_cast<uint64_t>((max - 64) / 2);
    const auto offer = [&](int value) {
      for (const Elem& e : ref)
        if (e.value == value) return;  // a duplicate: not even the clock moves
      ++clock;
      if (static_cast<int>(ref.size()) < max) {
        ref.push_back({value, 0, clock});
        log.push_back(static_cast<int>(ref.size()) - 1);
        return;
      }
      int v = -1;
      for (int i = 64; i < static_cast<int>(ref.size()); ++i)
        if (ref[static_cast<size_t>(i)].born + window < clock &&
            (v < 0 || ref[static_cast<size_t>(i)].uses < ref[static_cast<size_t>(v)].uses))
          v = i;
      if (v < 0) return;  // nothing old enough: dropped
      ref[static_cast<size_t>(v)] = {value, 0, clock};
      log.push_back(v);
    };
    for (int v = -252; v <= 252; v += 8) offer(v);
    ASSERT_EQ(d.count(0), 64);
    std::mt19937 rng(static_cast<uint32_t>(max));
    int replaced = 0, dropped = 0;
    for (int step = 0; step < 3000; ++step) {  // past the change ring's size (4096) for max < 2048
      mmp::Lesson lesson;
      const int uses = static_cast<int>(rng() % 6), news = static_cast<int>(rng() % 5);
      for (int u = 0; u < uses; ++u) {
        // Few indices get most uses, as leaves do.
        const int i = static_cast<int>(rng() % 3 == 0 ? rng() % ref.size() : rng() % std::min<size_t>(ref.size(), 80));
        lesson.uses.push_back(static_cast<uint32_t>(i));
        ++ref[static_cast<size_t>(i)].uses;
      }
      for (int k = 0; k < news; ++k) {
        const int value = static_cast<int>(rng() % 511) - 255;
        *lesson.add(0, 0) = static_cast<int16_t>(value);
        const size_t before = log.size();
        const bool full = static_cast<int>(ref.size()) >= max;
        offer(value);
        if (full) (log.size() > before ? replaced : dropped) += 1;
      }
      d.add(lesson);
      ASSERT_EQ(d.count(0), static_cast<int>(ref.size())) << "max " << max << " step " << step;
      for (int i = 0; i < d.count(0); ++i) {
        ASSERT_EQ(d.elem(0, i)[0], ref[static_cast<size_t>(i)].value)
            << "max " << max << " step " << step << " i " << i;
        ASSERT_EQ(d.uses(0, i), ref[static_cast<size_t>(i)].uses);
      }
      const mmp::ScaleView v = d.view(0);
      ASSERT_EQ(v.generation, log.size());
      ASSERT_EQ(v.clock, clock);  // what a device that takes the dictionary ages it by
      ASSERT_GE(v.change_ring, 2 * max);
      for (uint64_t g = log.size() > static_cast<size_t>(v.change_ring) ? log.size() - v.change_ring : 0;
           g < log.size(); ++g)
        ASSERT_EQ(v.changes[g % static_cast<uint64_t>(v.change_ring)], log[g]) << "change " << g;
    }
    if (max == 64) {
      EXPECT_EQ(replaced, 0);  // only flat elements: nothing may go
    } else {
      EXPECT_GT(replaced, 20) << max;
    }
    std::printf("max %d: %d replaced, %d dropped\n", max, replaced, dropped);
  }
}

// A dictionary handed to a search backend's device (LeafSearch::hold_dictionary()): fresh
// while it holds only its flat elements, and once held it refuses to learn on the host,
// whose copy stopped (the device's learning itself is tested on the GPU).
TEST(Mmp, DictionaryHeldOnADeviceRefusesToLearn) {
  mmp::Dictionary d(100, 2, true);
  EXPECT_TRUE(d.fresh());
  EXPECT_FALSE(d.held_on_device());
  for (int s = 0; s < mmp::kScales; ++s) EXPECT_EQ(d.view(s).clock, d.count(s) > 0 ? 64u : 0u);
  mmp::Lesson lesson;
  int16_t* e = lesson.add(1, 1);
  for (int i = 0; i < 4; ++i) e[i] = static_cast<int16_t>(5 * i - 7);
  d.add(lesson);
  EXPECT_FALSE(d.fresh());
  mmp::Dictionary h(100, 2, true);
  h.hold_on_device(std::make_shared<int>(0));
  EXPECT_TRUE(h.held_on_device());
  try {
    h.add(lesson);
    ADD_FAILURE() << "a held dictionary learnt on the host";
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::Internal);
  }
  EXPECT_TRUE(h.fresh());
}

// A held dictionary learning from a device's duplicate verdicts (Dictionary::add_decided(),
// the rounds that learn on the GPU): the verdicts worked out here from the contents, the
// placements applied to a copy of the contents, and the result is add()'s, index for index,
// with its uses and counts: small replacing dictionaries, many equal elements within a round
// and across rounds (an equal element replaced earlier in the same round is no longer
// there), rounds longer than the replacement window (elements of the round itself replaced),
// drops, and one malformed verdict rejected.
TEST(Mmp, DictionaryLearnsFromDeviceVerdictsAsAddDoes) {
  for (const auto [max, log, pool, news] :
       {std::tuple{80, 2, 6, 12}, std::tuple{66, 1, 4, 9}, std::tuple{100, 3, 40, 70}, std::tuple{512, 2, 5000, 120}}) {
    mmp::Dictionary ref(max, log, true), held(max, log, true);
    held.hold_on_device(std::make_shared<int>(0));
    // The device's copy: each scale's elements, as the placements leave them.
    std::vector<std::vector<std::vector<int16_t>>> dev(mmp::kScales);
    for (int s = 0; s < mmp::kScales; ++s)
      for (int i = 0; i < ref.count(s); ++i) {
        const int size = 1 << ((s % (mmp::kMaxBlockLog + 1)) + (s / (mmp::kMaxBlockLog + 1)));
        dev[static_cast<size_t>(s)].emplace_back(ref.elem(s, i), ref.elem(s, i) + size);
      }
    std::mt19937 rng(static_cast<uint32_t>(max + pool));
    int placed = 0, replaced = 0, dups = 0;
    std::vector<mmp::Placement> out;
    for (int round = 0; round < 40; ++round) {
      mmp::Lesson lesson;
      for (int u = 0; u < 20; ++u) {
        const int lw = static_cast<int>(rng() % (log + 1)), lh = static_cast<int>(rng() % (log + 1));
        const int s = mmp::scale_of(lw, lh);
        lesson.uses.push_back(static_cast<uint32_t>(s) << 16 | static_cast<uint32_t>(rng() % ref.count(s)));
      }
      const int n = 1 + static_cast<int>(rng() % news);
      for (int k = 0; k < n; ++k) {  // elements from a small pool of patterns: many equal ones
        const int lw = static_cast<int>(rng() % (log + 1)), lh = static_cast<int>(rng() % (log + 1));
        const int pattern = static_cast<int>(rng() % pool);
        int16_t* e = lesson.add(lw, lh);
        for (int q = 0; q < (1 << (lw + lh)); ++q)
          e[q] = static_cast<int16_t>((pattern * 37 + q * (pattern % 11)) % 197 - 98);
      }
      // The verdicts, as the device finds them: each element resized to each scale, against
      // the scale's elements as the round found them and the round's earlier elements.
      std::vector<std::vector<int64_t>> verdicts(mmp::kScales);
      mmp::RoundVerdicts rv;
      for (int lh = 0; lh <= log; ++lh)
        for (int lw = 0; lw <= log; ++lw) {
          const int s = mmp::scale_of(lw, lh), size = 1 << (lw + lh);
          std::vector<std::vector<int16_t>> resized(static_cast<size_t>(n),
                                                    std::vector<int16_t>(static_cast<size_t>(size)));
          auto& v = verdicts[static_cast<size_t>(s)];
          for (int j = 0; j < n; ++j) {
            const mmp::NewElement& ne = lesson.elements[static_cast<size_t>(j)];
            mmp::resize_into(lesson.element(ne), ne.lw, ne.lh, lw, lh, resized[static_cast<size_t>(j)].data());
            int before = -1, first = j;
            for (size_t i = 0; i < dev[static_cast<size_t>(s)].size(); ++i)
              if (dev[static_cast<size_t>(s)][i] == resized[static_cast<size_t>(j)]) before = static_cast<int>(i);
            for (int i = j - 1; i >= 0; --i)
              if (resized[static_cast<size_t>(i)] == resized[static_cast<size_t>(j)]) first = i;
            v.push_back(mmp::RoundVerdicts::pack(before, first));
            dups += before >= 0 || first < j;
          }
          rv.scales[static_cast<size_t>(s)] = v.data();
        }
      ref.add(lesson);
      held.add_decided(lesson.uses, n, rv, &out);
      for (const mmp::Placement& pl : out) {
        const int lw = pl.s % (mmp::kMaxBlockLog + 1), lh = pl.s / (mmp::kMaxBlockLog + 1);
        std::vector<int16_t> e(static_cast<size_t>(1) << (lw + lh));
        const mmp::NewElement& ne = lesson.elements[static_cast<size_t>(pl.j)];
        mmp::resize_into(lesson.element(ne), ne.lw, ne.lh, lw, lh, e.data());
        auto& scale = dev[static_cast<size_t>(pl.s)];
        // Placements come in any order (an index appended and replaced in one round keeps
        // only its last one), so new indices may come before lower ones.
        if (pl.index >= static_cast<int>(scale.size()))
          scale.resize(static_cast<size_t>(pl.index) + 1), ++placed;
        else
          ++replaced;
        scale[static_cast<size_t>(pl.index)] = e;
      }
      for (int lh = 0; lh <= log; ++lh)
        for (int lw = 0; lw <= log; ++lw) {
          const int s = mmp::scale_of(lw, lh), size = 1 << (lw + lh);
          ASSERT_EQ(held.count(s), ref.count(s)) << "max " << max << " round " << round << " scale " << s;
          ASSERT_EQ(static_cast<int>(dev[static_cast<size_t>(s)].size()), ref.count(s));
          for (int i = 0; i < ref.count(s); ++i) {
            ASSERT_EQ(dev[static_cast<size_t>(s)][static_cast<size_t>(i)],
                      std::vector<int16_t>(ref.elem(s, i), ref.elem(s, i) + size))
                << "max " << max << " round " << round << " scale " << s << " index " << i;
            ASSERT_EQ(held.uses(s, i), ref.uses(s, i));
          }
          ASSERT_EQ(held.view(s).clock, ref.view(s).clock);
        }
    }
    EXPECT_GT(placed, 0) << max;
    EXPECT_GT(replaced, 0) << max;
    EXPECT_GT(dups, 0) << max;
    // A verdict that names a later element as the first equal one is malformed.
    std::vector<int64_t> bad(4, mmp::RoundVerdicts::pack(-1, 3));
    mmp::RoundVerdicts rb;
    for (int s = 0; s < mmp::kScales; ++s) rb.scales[static_cast<size_t>(s)] = bad.data();
    EXPECT_THROW(held.add_decided({}, 2, rb, &out), Error);
  }
}

// Replacement on every scale of a 16x16 block's dictionaries: no scale ever holds two equal
// elements (the duplicate table stays whole through deletions), the sum order stays sorted,
// the counts stay at the size.
TEST(Mmp, ReplacingScalesStayConsistent) {
  mmp::Dictionary d(80, 4, true);
  d.keep_sum_order();
  std::mt19937 rng(7);
  for (int step = 0; step < 60; ++step) {
    mmp::Lesson lesson;
    for (int k = 0; k < 6; ++k) {
      const int lw = static_cast<int>(rng() % 5), lh = static_cast<int>(rng() % 5);
      int16_t* e = lesson.add(lw, lh);
      const int base = static_cast<int>(rng() % 64) * 4 - 128;  // few values: many duplicates
      for (int i = 0; i < 1 << (lw + lh); ++i) e[i] = static_cast<int16_t>(base + static_cast<int>(rng() % 3) * 8);
    }
    for (int u = 0; u < 20; ++u) {
      const int s = mmp::scale_of(static_cast<int>(rng() % 5), static_cast<int>(rng() % 5));
      lesson.uses.push_back(static_cast<uint32_t>(s) << 16 | static_cast<uint32_t>(rng() % d.count(s)));
    }
    d.add(lesson);
  }
  for (int lh = 0; lh <= 4; ++lh)
    for (int lw = 0; lw <= 4; ++lw) {
      const int s = mmp::scale_of(lw, lh), n = 1 << (lw + lh);
      EXPECT_EQ(d.count(s), 80) << lw << "x" << lh;
      EXPECT_GT(d.view(s).generation, 80u) << "no replacement at scale " << lw << "x" << lh;
      std::set<std::vector<int16_t>> seen;
      for (int i = 0; i < d.count(s); ++i) {
        std::vector<int16_t> e(d.elem(s, i), d.elem(s, i) + n);
        int sum = 0;
        for (int16_t x : e) sum += x;
        EXPECT_EQ(d.sums(s)[static_cast<size_t>(i)], sum);
        EXPECT_TRUE(seen.insert(e).second) << "duplicate at scale " << lw << "x" << lh << " index " << i;
      }
      const auto& order = d.by_sum(s);
      ASSERT_EQ(order.size(), static_cast<size_t>(d.count(s)));
      EXPECT_EQ(std::set<int>(order.begin(), order.end()).size(), order.size());
      for (size_t k = 1; k < order.size(); ++k)
        EXPECT_LE(d.sums(s)[static_cast<size_t>(order[k - 1])], d.sums(s)[static_cast<size_t>(order[k])]);
    }
}

// The codec with replacing dictionaries: decoded planes equal the encoder's, untiled and in
// every tile mode and block size, with carried state; the pruned search, an exhaustive
// backend and any thread count write the same bytes; 64 elements (nothing learnt fits)
// write what "stop" writes, and more replace and code for less.
TEST(Mmp, ReplacingDictionariesDecodeExactly) {
  auto search = std::make_shared<test::ExhaustiveSearch>();
  int cases = 0;
  for (int tile_mode = -1; tile_mode <= 2; ++tile_mode)
    for (const auto& [w, h] : {std::pair{1, 1}, {3, 7}, {70, 45}})
      for (int bl = 3; bl <= 5; ++bl) {
        const auto img = plane((w + bl) % 2 ? "photo" : "text", w, h, static_cast<uint32_t>(w + bl));
        mmp::Params p;
        p.lambda = 20;
        p.block_log = bl;
        p.max_dict = 72;
        p.replace_least_used = true;
        if (tile_mode >= 0) {
          p.tile_mode = static_cast<mmp::TileMode>(tile_mode);
          p.tile_w = p.tile_h = 2 << bl;
        }
        mmp::PlaneState enc(p), dec(p);
        const std::string what = "mode " + std::to_string(tile_mode) + " " + std::to_string(w) + "x" +
                                 std::to_string(h) + " block " + std::to_string(1 << bl);
        for (int frame = 0; frame < 2; ++frame) {  // the second continues the first's state
          mmp::PlaneState once(p), other(p);
          if (frame == 1) {  // the same state from the CPU search with one thread and from another backend
            mmp::encode_plane(img.data(), w, h, p, &once);
            mmp::Params q = p;
            q.search = search;
            mmp::encode_plane(img.data(), w, h, q, &other);
          }
          const mmp::PlaneResult r = mmp::encode_plane(img.data(), w, h, p, &enc);
          ASSERT_EQ(mmp::decode_plane(r.bytes.data(), r.bytes.size(), w, h, p, &dec), r.recon) << what;
          if (frame == 1) {
            set_cpu_threads(1);
            const mmp::PlaneResult one = mmp::encode_plane(img.data(), w, h, p, &once);
            set_cpu_threads(0);
            mmp::Params q = p;
            q.search = search;
            const mmp::PlaneResult ex = mmp::encode_plane(img.data(), w, h, q, &other);
            EXPECT_EQ(one.bytes, r.bytes) << what;
            EXPECT_EQ(ex.bytes, r.bytes) << what;
          }
        }
        ++cases;
      }
  EXPECT_EQ(cases, 36);
  const int w = 128, h = 96;
  const auto img = plane("photo", w, h, 3);
  const auto coded = [&](int dict, bool replace) {
    mmp::Params p;
    p.lambda = 25;
    p.max_dict = dict;
    p.replace_least_used = replace;
    return mmp::encode_plane(img.data(), w, h, p);
  };
  EXPECT_EQ(coded(64, true).bytes, coded(64, false).bytes);
  const mmp::PlaneResult stop = coded(96, false), replace = coded(96, true);
  EXPECT_NE(stop.bytes, replace.bytes);
  const double j_stop = stop.sse + 25 * 8.0 * static_cast<double>(stop.bytes.size());
  const double j_replace = replace.sse + 25 * 8.0 * static_cast<double>(replace.bytes.size());
  std::printf("96 elements: stop J %.0f (%zu bytes), replace J %.0f (%zu bytes)\n", j_stop, stop.bytes.size(),
              j_replace, replace.bytes.size());
  EXPECT_LT(j_replace, j_stop);
}

// The GPU's sum-order search (codecs/mmp/sum_order.hpp's rules, small_rows_sum() in
// cuda/mmp_search.cu) skips runs of elements by integer bounds; walked as the kernel walks
// them, its warps interleaved at random and its chunks apart, the elements it searches
// always hold the exhaustive search's (J, index) minimum: dictionaries of 1 to 4096
// elements (partial runs and tiles), wide, narrow, constant and duplicated samples, sums
// at the ends of the range, cheap and dear rates, segments near and far from the elements.
TEST(Mmp, SumOrderWalkKeepsTheExhaustiveBest) {
  namespace so = mmp::sum_order;
  std::mt19937 rng(2811);
  double large = 0, large_searched = 0;  // uniform and small elements, 300 or more of them
  for (int n : {4, 8, 16})
    for (int count : {1, 5, 31, 32, 33, 127, 128, 129, 300, 512, 1000, 4096})
      for (int kind = 0; kind < 6; ++kind) {
        // Elements: uniform over the element range, small, constant, extreme (sums at the
        // range's ends), a few values duplicated many times, or uniform at one rate (where
        // the bounds are tightest).
        std::vector<int16_t> d(static_cast<size_t>(count) * n);
        for (size_t i = 0; i < d.size(); ++i) {
          const int u = static_cast<int>(rng() % 505) - 252;
          d[i] = static_cast<int16_t>(kind == 0 || kind == 5 ? u
                                      : kind == 1            ? u / 20
                                      : kind == 2            ? 7
                                      : kind == 3            ? (i / n % 2 ? 252 : -252)
                                                             : (static_cast<int>(i / n % 3) - 1) * 40);
        }
        std::vector<double> rate(static_cast<size_t>(count));
        const double lambda = kind == 4 ? 500 : 25;
        for (auto& r : rate) r = kind == 5 ? lambda * 1.75 : lambda * (1 + (rng() % 1200) / 100.0 + 0.75);
        std::vector<int> sum(static_cast<size_t>(count)), norm(static_cast<size_t>(count));
        for (int e = 0; e < count; ++e)
          for (int q = 0; q < n; ++q) {
            const int v = d[static_cast<size_t>(e) * n + q];
            sum[static_cast<size_t>(e)] += v, norm[static_cast<size_t>(e)] += v * v;
          }
        // The kernel's orders: by sum bucket (any order within a bucket: shuffled here) and by rate.
        std::vector<int> by_sum(static_cast<size_t>(count)), by_rate(static_cast<size_t>(count));
        std::iota(by_sum.begin(), by_sum.end(), 0);
        std::shuffle(by_sum.begin(), by_sum.end(), rng);
        std::stable_sort(by_sum.begin(), by_sum.end(), [&](int a, int b) {
          return so::bucket(sum[static_cast<size_t>(a)], n) < so::bucket(sum[static_cast<size_t>(b)], n);
        });
        std::iota(by_rate.begin(), by_rate.end(), 0);
        std::stable_sort(by_rate.begin(), by_rate.end(),
                         [&](int a, int b) { return rate[static_cast<size_t>(a)] < rate[static_cast<size_t>(b)]; });
        int zero = 0;
        while (zero < count && sum[static_cast<size_t>(by_sum[static_cast<size_t>(zero)])] < 0) ++zero;
        const int least_rate = so::rate_floor(rate[static_cast<size_t>(by_rate[0])]);
        for (int segment = 0; segment < 12; ++segment) {
          std::vector<int> x(static_cast<size_t>(n));
          const int spread = segment < 4 ? 255 : segment < 8 ? 20 : 0;
          const int offset = segment % 4 == 3 ? 200 : segment % 4 == 2 ? -200 : 0;
          int sx = 0, sq = 0;
          for (auto& v : x) {
            v = std::clamp(offset + (spread ? static_cast<int>(rng() % (2 * spread + 1)) - spread : 0), -255, 255);
            sx += v, sq += v * v;
          }
          // J as the kernel computes it: exact SSE, plus the rate, one rounding.
          const auto j_of = [&](int e) {
            int dot = 0;
            for (int q = 0; q < n; ++q) dot += x[static_cast<size_t>(q)] * d[static_cast<size_t>(e) * n + q];
            return static_cast<double>(sq + norm[static_cast<size_t>(e)] - 2 * dot) + rate[static_cast<size_t>(e)];
          };
          double want_j = INFINITY;
          int want_i = INT_MAX;
          for (int e = 0; e < count; ++e)
            if (j_of(e) < want_j) want_j = j_of(e), want_i = e;
          for (int chunks : {1, 3}) {
            double got_j = INFINITY;
            int got_i = INT_MAX, searched = 0;
            const auto take = [&](int e) {
              const double j = j_of(e);
              if (j < got_j || (j == got_j && e < got_i)) got_j = j, got_i = e;
              return j;
            };
            for (int chunk = 0; chunk < chunks; ++chunk) {
              double seed = INFINITY;
              for (int t = 0; t < std::min(so::kRun, count); ++t)
                seed = std::min(seed, take(by_rate[static_cast<size_t>(t)]));
              so::model_walk(
                  count, zero, n, sx, seed, least_rate, chunk, chunks,
                  [&](int p) { return sum[static_cast<size_t>(by_sum[static_cast<size_t>(p)])]; },
                  [&](int p) { return rate[static_cast<size_t>(by_sum[static_cast<size_t>(p)])]; },
                  [&](int p) {
                    ++searched;
                    return take(by_sum[static_cast<size_t>(p)]);
                  },
                  [&](unsigned ready) {  // any warp that has runs left
                    int w = static_cast<int>(rng() % 4);
                    while (!(ready >> w & 1u)) w = (w + 1) % 4;
                    return w;
                  });
            }
            ASSERT_EQ(got_j, want_j) << n << " samples, " << count << " elements, kind " << kind << ", segment "
                                     << segment << ", " << chunks << " chunks";
            ASSERT_EQ(got_i, want_i) << n << " samples, " << count << " elements, kind " << kind << ", segment "
                                     << segment << ", " << chunks << " chunks";
            if (kind <= 1 && count >= 300 && chunks == 1) large += count, large_searched += searched;
          }
        }
      }
  // The rules do skip (else the equality above would prove nothing): of large dictionaries
  // of varied elements the walk searches about half (50.5% with this seed).
  EXPECT_LT(large_searched, 0.7 * large) << large_searched / large;
  std::printf("sum-order walk: %.1f%% of large dictionaries searched\n", 100 * large_searched / large);
}
