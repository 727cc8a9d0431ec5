// DEFLATE encoder (CPU reference): every stream we write is read back by zlib's inflate —
// raw, zlib and gzip containers, all levels, one and many segments, over random, constant,
// repetitive, text, image and tiny inputs; determinism; the length-limited codes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <random>

#include "codecs/deflate/deflate.hpp"
#include "test_util.hpp"
#include "zlib_util.hpp"

using namespace vfp;

namespace {

std::vector<std::pair<std::string, std::vector<uint8_t>>> inputs() {
  std::vector<std::pair<std::string, std::vector<uint8_t>>> v;
  v.push_back({"empty", {}});
  v.push_back({"one", {42}});
  v.push_back({"two", {7, 7}});
  std::mt19937 rng(9);
  std::vector<uint8_t> r(300000);
  for (auto& x : r) x = static_cast<uint8_t>(rng());
  v.push_back({"random", r});
  v.push_back({"constant", std::vector<uint8_t>(400000, 0x55)});
  std::vector<uint8_t> rep;
  for (int i = 0; i < 50000; ++i) rep.push_back(static_cast<uint8_t>("abcabcabdabcabcab"[i % 17]));
  v.push_back({"repetitive", rep});
  std::ifstream f(std::string(VFPIPE_SOURCE_DIR) + "/README.md", std::ios::binary);
  v.push_back({"text", std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>())});
  // A video-like frame: smooth gradients with a little noise.
  std::vector<uint8_t> img;
  std::normal_distribution<float> n(0, 2);
  for (int y = 0; y < 360; ++y)
    for (int x = 0; x < 640; ++x)
      img.push_back(static_cast<uint8_t>(std::clamp(x / 3.f + y / 5.f + n(rng), 0.f, 255.f)));
  v.push_back({"image", img});
  return v;
}

}  // namespace

TEST(Deflate, CodeLengthsAreLimitedAndComplete) {
  // Fibonacci frequencies make plain Huffman codes as deep as the alphabet.
  std::vector<uint32_t> f(30);
  f[0] = f[1] = 1;
  for (size_t i = 2; i < f.size(); ++i) f[i] = f[i - 1] + f[i - 2];
  for (int max_bits : {15, 7, 5}) {
    const auto len = deflate::limited_code_lengths(f, max_bits);
    double kraft = 0;
    int deepest = 0;
    for (uint8_t l : len) {
      ASSERT_GE(l, 1);
      deepest = std::max<int>(deepest, l);
      kraft += std::ldexp(1.0, -l);
    }
    EXPECT_LE(deepest, max_bits);
    EXPECT_DOUBLE_EQ(kraft, 1.0);  // a complete prefix code
  }
  // Unused symbols get no code; a single used one gets one bit.
  std::vector<uint32_t> one(10, 0);
  one[4] = 9;
  const auto l1 = deflate::limited_code_lengths(one, 15);
  EXPECT_EQ(l1[4], 1);
  EXPECT_EQ(l1[3], 0);
  // Equal weights: a balanced code.
  const auto eq = deflate::limited_code_lengths(std::vector<uint32_t>(8, 5), 15);
  for (uint8_t l : eq) EXPECT_EQ(l, 3);
}

TEST(Deflate, LengthAndDistanceCodesMatchRfc1951Tables) {
  // RFC 1951 3.2.5, written out: the closed forms in deflate_core.hpp must agree.
  const int len_base[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                            31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
  const int dist_base[30] = {1,   2,   3,   4,   5,   7,    9,    13,   17,   25,   33,   49,   65,    97,    129,
                             193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
  for (int len = 3; len <= 258; ++len) {
    int code = 28;
    while (len_base[code] > len) --code;
    ASSERT_EQ(deflate::core::len_code(static_cast<uint32_t>(len)), code) << len;
    ASSERT_EQ(static_cast<int>(deflate::core::len_base(code)), len_base[code]);
    const int next = code == 28 ? 259 : len_base[code + 1];
    if (code != 28 && code != 27) ASSERT_EQ(1 << deflate::core::len_extra_bits(code), next - len_base[code]) << code;
  }
  EXPECT_EQ(deflate::core::len_extra_bits(27), 5);  // 227..257 (258 has its own code)
  EXPECT_EQ(deflate::core::len_extra_bits(28), 0);
  for (int d = 1; d <= 32768; ++d) {
    int code = 29;
    while (dist_base[code] > d) --code;
    ASSERT_EQ(deflate::core::dist_code(static_cast<uint32_t>(d)), code) << d;
    ASSERT_EQ(static_cast<int>(deflate::core::dist_base(code)), dist_base[code]);
    const int next = code == 29 ? 32769 : dist_base[code + 1];
    ASSERT_EQ(1 << deflate::core::dist_extra_bits(code), next - dist_base[code]) << code;
  }
}

TEST(Deflate, SegmentsShareBlocksByTokenCount) {
  // A segment opens a block when the tokens before it cross a multiple of 16 Ki.
  const std::vector<uint8_t> s = deflate::block_starts({100, 100, 20000, 5, 16384, 1, 40000, 7});
  EXPECT_EQ(s, (std::vector<uint8_t>{1, 0, 0, 1, 0, 1, 0, 1}));
#if VFPIPE_HAVE_ZLIB
  // Many segments in few blocks, and a byte-aligned stream every batch.
  std::vector<uint8_t> data(700000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>((i / 3000) * 7 + (i % 13 == 0));
  for (size_t batch : {size_t(4096), size_t(5 * 4096), size_t(1) << 30}) {
    deflate::Options o;
    o.level = 4;
    o.segment_bytes = 4096;
    o.batch_bytes = batch;
    ASSERT_EQ(test::inflate_all(deflate::compress_zlib(data.data(), data.size(), o), 15, data.size()), data) << batch;
  }
#endif
}

TEST(Deflate, ChecksumsByHand) {
  const std::string s = "Wikipedia";
  EXPECT_EQ(deflate::adler32(reinterpret_cast<const uint8_t*>(s.data()), s.size()), 0x11E60398u);
  const std::string c = "123456789";
  EXPECT_EQ(deflate::crc32(reinterpret_cast<const uint8_t*>(c.data()), c.size()), 0xCBF43926u);
}

TEST(Deflate, ZlibInflatesEveryStream) {
#if !VFPIPE_HAVE_ZLIB
  GTEST_SKIP() << "built without zlib (the outside reference)";
#else
  for (const auto& [name, data] : inputs())
    for (int level : {0, 1, 4, 6, 9})
      for (size_t seg : {size_t(1) << 16, size_t(4096)}) {
        deflate::Options o;
        o.level = level;
        o.segment_bytes = seg;
        const std::string what = name + " level " + std::to_string(level) + " segment " + std::to_string(seg);
        const auto raw = deflate::compress(data.data(), data.size(), o);
        ASSERT_EQ(test::inflate_all(raw, -15, data.size()), data) << what << " (raw)";
        ASSERT_EQ(test::inflate_all(deflate::compress_zlib(data.data(), data.size(), o), 15, data.size()), data)
            << what;
        ASSERT_EQ(test::inflate_all(deflate::compress_gzip(data.data(), data.size(), o), 31, data.size()), data)
            << what;
        EXPECT_EQ(deflate::compress(data.data(), data.size(), o), raw) << what << ": not deterministic";
      }
#endif
}

TEST(Deflate, RatioAgainstZlib) {
#if !VFPIPE_HAVE_ZLIB
  GTEST_SKIP() << "built without zlib";
#else
  // Not a speed or ratio target (those are the GPU encoder's): a sanity bound that the
  // encoder compresses like a DEFLATE encoder should on text and on an image.
  for (const auto& [name, data] : inputs()) {
    if (name != "text" && name != "image") continue;
    uLongf zn = compressBound(data.size());
    std::vector<uint8_t> z(zn);
    ASSERT_EQ(compress2(z.data(), &zn, data.data(), data.size(), 6), Z_OK);
    deflate::Options o;
    o.level = 6;
    const auto ours = deflate::compress_zlib(data.data(), data.size(), o);
    RecordProperty(name + "_ours", static_cast<int>(ours.size()));
    RecordProperty(name + "_zlib6", static_cast<int>(zn));
    EXPECT_LT(ours.size(), zn * 13 / 10) << name << ": " << ours.size() << " vs zlib -6 " << zn;
  }
#endif
}

TEST(Deflate, CliCompressesAFile) {
  const std::string in = test::tmp_path("deflate_in.bin"), bin = VFPIPE_BIN;
  std::vector<uint8_t> data;
  for (int i = 0; i < 200000; ++i) data.push_back(static_cast<uint8_t>((i * 7) % 251 + (i / 1000) % 3));
  std::ofstream(in, std::ios::binary)
      .write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  const test::CmdResult r = test::run_cmd(bin + " compress " + in + " --level 9 --segment 16");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("level 9, gzip, 16 KiB segments"), std::string::npos) << r.out;
  std::ifstream f(in + ".gz", std::ios::binary);
  const std::vector<uint8_t> gz((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_LT(gz.size(), data.size() / 10);
#if VFPIPE_HAVE_ZLIB
  EXPECT_EQ(test::inflate_all(gz, 31, data.size()), data);
#endif
  EXPECT_EQ(test::run_cmd(bin + " compress /nonexistent-file").rc, 1);
  EXPECT_EQ(test::run_cmd(bin + " compress " + in + " --level 12").rc, 2);
}
