// CUDA DEFLATE encoder: byte-identical to the CPU reference (every level tested, both
// segment sizes, raw/zlib/gzip), streams read back by zlib's inflate (when built with zlib),
// checksums on the GPU equal to the CPU's, and GPU PNGs identical to the CPU encoder's.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <random>

#include "codecs/deflate/deflate.hpp"
#include "codecs/deflate/png.hpp"
#include "gpu_test_util.hpp"
#include "test_util.hpp"
#if VFPIPE_HAVE_CUDA
#include "cuda/deflate.hpp"
#endif
#include "zlib_util.hpp"

using namespace vfp;

namespace {

std::vector<uint8_t> video_like(int w, int h, int frames, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0, 1.5f);
  std::vector<uint8_t> v;
  v.reserve(static_cast<size_t>(w) * h * frames);
  for (int f = 0; f < frames; ++f)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        const float base = (x + 2 * f) / 4.f + y / 6.f + ((x / 40 + y / 30) % 2) * 40.f;
        v.push_back(static_cast<uint8_t>(std::clamp(base + noise(rng), 0.f, 255.f)));
      }
  return v;
}

std::vector<std::pair<std::string, std::vector<uint8_t>>> inputs() {
  std::vector<std::pair<std::string, std::vector<uint8_t>>> v;
  v.push_back({"empty", {}});
  v.push_back({"one", {42}});
  v.push_back({"two", {7, 7}});
  v.push_back({"three", {1, 2, 3}});
  std::mt19937 rng(5);
  std::vector<uint8_t> r(300001);
  for (auto& x : r) x = static_cast<uint8_t>(rng());
  v.push_back({"random", r});
  v.push_back({"constant", std::vector<uint8_t>(400000, 0x55)});
  std::vector<uint8_t> rep;
  for (int i = 0; i < 70000; ++i) rep.push_back(static_cast<uint8_t>("abcabcabdabcabcab"[i % 17]));
  v.push_back({"repetitive", rep});
  std::vector<uint8_t> txt;
  for (const char* f : {"/README.md", "/docs/deflate.md", "/pipeline/engine.cpp"}) {
    std::ifstream in(std::string(VFPIPE_SOURCE_DIR) + f, std::ios::binary);
    txt.insert(txt.end(), std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  v.push_back({"text", txt});
  v.push_back({"video", video_like(641, 361, 3, 1)});
  // Runs of every length around the 258 limit and the chunk/segment edges.
  std::vector<uint8_t> runs;
  for (int k = 1; k < 600; ++k) runs.insert(runs.end(), static_cast<size_t>(k), static_cast<uint8_t>(k * 37));
  v.push_back({"runs", runs});
  return v;
}

}  // namespace

#if VFPIPE_HAVE_CUDA

TEST(GpuDeflate, ByteIdenticalToCpuReference) {
  REQUIRE_GPU();
  cuda::DeflateEncoder enc;
  for (const auto& [name, data] : inputs())
    for (int level : {0, 1, 2, 4, 6, 9})
      for (size_t seg : {size_t(65536), size_t(4096)}) {
        deflate::Options o;
        o.level = level;
        o.segment_bytes = seg;
        const std::string what = name + " level " + std::to_string(level) + " segment " + std::to_string(seg);
        const auto cpu = deflate::compress(data.data(), data.size(), o);
        ASSERT_EQ(enc.compress(data.data(), data.size(), o, cuda::DeflateContainer::Raw), cpu) << what;
        if (level != 6 || seg != 65536) continue;
        ASSERT_EQ(enc.compress(data.data(), data.size(), o, cuda::DeflateContainer::Zlib),
                  deflate::compress_zlib(data.data(), data.size(), o))
            << what;
        ASSERT_EQ(enc.compress(data.data(), data.size(), o, cuda::DeflateContainer::Gzip),
                  deflate::compress_gzip(data.data(), data.size(), o))
            << what;
#if VFPIPE_HAVE_ZLIB
        ASSERT_EQ(
            test::inflate_all(enc.compress(data.data(), data.size(), o, cuda::DeflateContainer::Zlib), 15, data.size()),
            data)
            << what;
#endif
      }
}

TEST(GpuDeflate, EveryLevelOnVideoFrames) {
  REQUIRE_GPU();
  cuda::DeflateEncoder enc;
  const auto data = video_like(1921, 1081, 2, 7);  // 4.2 MB, 64 segments
  for (int level = 1; level <= 9; ++level) {
    deflate::Options o;
    o.level = level;
    ASSERT_EQ(enc.compress(data.data(), data.size(), o, cuda::DeflateContainer::Zlib),
              deflate::compress_zlib(data.data(), data.size(), o))
        << "level " << level;
  }
}

TEST(GpuDeflate, BatchEdgesKeepTheHistory) {
  REQUIRE_GPU();
  // Batches of 4 segments: the history (data, chains, last-position tables) crosses them.
  cuda::DeflateEncoder enc;
  const auto data = video_like(1001, 999, 2, 9);
  for (int level : {1, 6}) {
    deflate::Options o;
    o.level = level;
    o.batch_bytes = 4 * 65536;
    ASSERT_EQ(enc.compress(data.data(), data.size(), o, cuda::DeflateContainer::Zlib),
              deflate::compress_zlib(data.data(), data.size(), o))
        << "level " << level;
  }
  deflate::Options o;
  o.segment_bytes = 4096;
  o.batch_bytes = 3 * 4096;
  ASSERT_EQ(enc.compress(data.data(), 300000, o, cuda::DeflateContainer::Raw),
            deflate::compress(data.data(), 300000, o));
}

TEST(GpuDeflate, LargeInputInflatesBack) {
  REQUIRE_GPU();
#if !VFPIPE_HAVE_ZLIB
  GTEST_SKIP() << "built without zlib (the outside reference)";
#else
  // 300 MB of video-like frames (more than one 256 MiB batch), checked by zlib.
  std::vector<uint8_t> frame = video_like(3840, 2160, 1, 3);
  std::vector<uint8_t> big;
  big.reserve(300u << 20);
  while (big.size() + frame.size() <= (300u << 20)) {
    big.insert(big.end(), frame.begin(), frame.end());
    frame[big.size() % frame.size()] ^= 0x5A;  // frames differ a little
  }
  big.resize(big.size() + 12345, 9);
  cuda::DeflateEncoder enc;
  deflate::Options o;
  o.level = 1;
  const auto z = enc.compress(big.data(), big.size(), o, cuda::DeflateContainer::Gzip);
  EXPECT_LT(z.size(), big.size() / 2);
  ASSERT_TRUE(test::inflate_all(z, 31, big.size()) == big);
#endif
}

TEST(GpuDeflate, ChecksumsMatchCpu) {
  REQUIRE_GPU();
  std::mt19937 rng(11);
  cuda::Stream s;
  for (size_t n : {size_t(0), size_t(1), size_t(127), size_t(128), size_t(129), size_t(100003), size_t(5u << 20)}) {
    std::vector<uint8_t> v(n);
    for (auto& x : v) x = static_cast<uint8_t>(rng());
    if (n > 1000) std::fill(v.begin() + 500, v.begin() + 900, 0xFF);  // long runs of 255 (sum bounds)
    cuda::DeviceBuffer d(std::max<size_t>(n, 1));
    if (n) cuda::memcpy_h2d_async(d.get(), v.data(), n, s.get());
    EXPECT_EQ(cuda::adler32_device(d.get(), n, s.get()), deflate::adler32(v.data(), n)) << n;
    EXPECT_EQ(cuda::crc32_device(d.get(), n, s.get()), deflate::crc32(v.data(), n)) << n;
  }
}

TEST(GpuDeflate, PngIdenticalToCpuEncoder) {
  REQUIRE_GPU();
  cuda::DeflateEncoder enc;
  cuda::Stream s;
  std::mt19937 rng(4);
  struct Case {
    int w, h, ch;
    bool swap;
  };
  for (const Case& k : {Case{1, 1, 1}, Case{3, 7, 3}, Case{3, 7, 4}, Case{1921, 1081, 3}, Case{1921, 1081, 1},
                        Case{640, 360, 3}, Case{640, 360, 4}}) {
    for (bool swap : {false, true}) {
      if (swap && k.ch == 1) continue;
      const size_t pitch = static_cast<size_t>(k.w) * k.ch + 37;  // pitched rows
      std::vector<uint8_t> img(pitch * k.h);
      // A mix: smooth gradients (Sub/Up/Paeth win) and noisy patches (None wins).
      for (int y = 0; y < k.h; ++y)
        for (size_t i = 0; i < static_cast<size_t>(k.w) * k.ch; ++i)
          img[y * pitch + i] =
              static_cast<uint8_t>(((y / 16 + i / 48) % 3 == 0) ? rng() : (i / 3 + y * 2 + i % 3 * 50));
      cuda::DeviceBuffer d(img.size());
      cuda::memcpy_h2d_async(d.get(), img.data(), img.size(), s.get());
      const auto gpu = enc.encode_png(d.get(), pitch, k.w, k.h, k.ch, swap, 6, s.get());
      const auto cpu = encode_png(img.data(), pitch, k.w, k.h, k.ch, swap, 6);
      ASSERT_EQ(gpu, cpu) << k.w << "x" << k.h << "x" << k.ch << (swap ? " swapped" : "");
    }
  }
}

#endif

#if VFPIPE_HAVE_CUDA
#include <cstdlib>
#include <filesystem>

TEST(GpuDeflate, LosslessSinksWriteTheCpuBytes) {
  REQUIRE_GPU();
  // The PNG sequence and .y4m.gz sinks of a CUDA run equal those of a CPU run with vfpipe's
  // own encoder (--deflate-engine vfpipe; a CPU run uses libdeflate by default), byte for byte.
  namespace fs = std::filesystem;
  const std::string bin = VFPIPE_BIN, dir = vfp::test::tmp_path("gpu_lossless");
  fs::remove_all(dir);
  for (const char* dev : {"cpu", "cuda"}) {
    fs::create_directories(dir + "/" + dev);
    const std::string base = bin + " run -q -i 'synthetic=size=643x361:frames=4:noise=gauss:sigma=4' -f median " +
                             "--deflate-engine vfpipe --device " + dev;
    ASSERT_EQ(std::system((base + " --pix-fmt bgr24 -o " + dir + "/" + dev + "/%02d.png --lossless").c_str()), 0)
        << dev;
    ASSERT_EQ(std::system((base + " -o " + dir + "/" + dev + "/clip.y4m.gz --compression-level 6").c_str()), 0) << dev;
  }
  auto bytes = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  for (const char* name : {"01.png", "04.png", "clip.y4m.gz"}) {
    const auto a = bytes(dir + "/cpu/" + name), b = bytes(dir + "/cuda/" + name);
    EXPECT_FALSE(a.empty()) << name;
    EXPECT_EQ(a, b) << name;
  }
  fs::remove_all(dir);
}
#endif
