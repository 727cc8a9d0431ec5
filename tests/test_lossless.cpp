// Lossless outputs: the PNG encoder (decoded by libpng: every size, channel count and filter
// type; size against libpng's own default output), the PNG image-sequence and .y4m.gz sinks
// through the CLI (bit-exact against the plain Y4M output), and bad output: a missing or
// unusable directory, and a disk that fills up mid-stream (file-size limit): clear error,
// earlier frames intact and valid, no partial file left.
#include <gtest/gtest.h>

#include <csetjmp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "codecs/deflate/png.hpp"
#include "test_util.hpp"
#if VFPIPE_HAVE_PNG
#include <png.h>
#endif
#if VFPIPE_HAVE_ZLIB
#include <zlib.h>
#endif

using namespace vfp;
namespace fs = std::filesystem;

namespace {

std::vector<uint8_t> read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

#if VFPIPE_HAVE_PNG
// Decodes with libpng into tightly packed 8-bit samples of `format` (PNG_FORMAT_*).
std::vector<uint8_t> libpng_decode(const std::vector<uint8_t>& png, int* w, int* h, int* channels) {
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  EXPECT_TRUE(png_image_begin_read_from_memory(&img, png.data(), png.size())) << img.message;
  *w = static_cast<int>(img.width);
  *h = static_cast<int>(img.height);
  *channels = static_cast<int>(PNG_IMAGE_SAMPLE_CHANNELS(img.format));
  std::vector<uint8_t> out(PNG_IMAGE_SIZE(img));
  EXPECT_TRUE(png_image_finish_read(&img, nullptr, out.data(), 0, nullptr)) << img.message;
  return out;
}

std::vector<uint8_t> libpng_encode(const std::vector<uint8_t>& px, int w, int h, int ch) {
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  img.width = static_cast<png_uint_32>(w);
  img.height = static_cast<png_uint_32>(h);
  img.format = ch == 1 ? PNG_FORMAT_GRAY : ch == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_RGBA;
  png_alloc_size_t len = 0;
  png_image_write_to_memory(&img, nullptr, &len, 0, px.data(), 0, nullptr);
  std::vector<uint8_t> mem(len);
  EXPECT_TRUE(png_image_write_to_memory(&img, mem.data(), &len, 0, px.data(), 0, nullptr));
  mem.resize(len);
  return mem;
}
#endif

// A test card: ramps (Sub, Up, Paeth win on different rows), flat areas, noisy bands (None
// wins) and rows built as the mean of left and up (Average wins).
std::vector<uint8_t> card(int w, int h, int ch, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(static_cast<size_t>(w) * h * ch);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < ch; ++c) {
        const int band = (y / 4) % 6;
        const size_t i = (static_cast<size_t>(y) * w + x) * ch + c;
        const int left = x > 0 ? v[i - ch] : 0, up = y > 0 ? v[i - static_cast<size_t>(w) * ch] : 0;
        int val = band == 0   ? x * 3 + c * 40
                  : band == 1 ? y * 5 + c
                  : band == 2 ? (x + y) * 2
                  : band == 3 ? 128
                  : band == 4 ? static_cast<int>(rng())
                              : (left + up) >> 1;  // exactly what the Average filter predicts
        v[i] = static_cast<uint8_t>(val);
      }
  return v;
}

}  // namespace

TEST(Png, LibpngDecodesEveryShape) {
#if !VFPIPE_HAVE_PNG
  GTEST_SKIP() << "built without libpng (the outside reference)";
#else
  for (int ch : {1, 3, 4})
    for (auto [w, h] : {std::pair{1, 1}, {3, 7}, {67, 45}, {1921, 11}})
      for (bool swap : {false, true}) {
        if (swap && ch == 1) continue;
        const std::vector<uint8_t> px = card(w, h, ch, static_cast<uint32_t>(w * h * ch));
        // Stored with a row pitch larger than the row.
        const size_t pitch = static_cast<size_t>(w) * ch + 5;
        std::vector<uint8_t> pitched(pitch * h, 0xEE);
        for (int y = 0; y < h; ++y)
          std::copy_n(px.begin() + static_cast<long>(y) * w * ch, w * ch,
                      pitched.begin() + static_cast<long>(y * pitch));
        const auto png = encode_png(pitched.data(), pitch, w, h, ch, swap, 6);
        int dw = 0, dh = 0, dc = 0;
        std::vector<uint8_t> back = libpng_decode(png, &dw, &dh, &dc);
        ASSERT_EQ(dw, w);
        ASSERT_EQ(dh, h);
        ASSERT_EQ(dc, ch);
        std::vector<uint8_t> expect = px;
        if (swap)
          for (size_t i = 0; i < expect.size(); i += ch) std::swap(expect[i], expect[i + 2]);
        ASSERT_EQ(back, expect) << w << "x" << h << "x" << ch << (swap ? " swapped" : "");
      }
#endif
}

TEST(Png, EveryFilterTypeIsChosenSomewhere) {
#if !VFPIPE_HAVE_ZLIB
  GTEST_SKIP() << "built without zlib";
#else
  const int w = 64, h = 48, ch = 3;
  const std::vector<uint8_t> px = card(w, h, ch, 3);
  const std::vector<uint8_t> rows = png_filter_rows(px.data(), static_cast<size_t>(w) * ch, w, h, ch, false);
  int seen[5] = {0};
  for (int y = 0; y < h; ++y) seen[rows[static_cast<size_t>(y) * (w * ch + 1)]]++;
  for (int f = 0; f < 5; ++f)
    EXPECT_GT(seen[f], 0) << "filter type " << f << " never chosen: " << seen[0] << " " << seen[1] << " " << seen[2]
                          << " " << seen[3] << " " << seen[4];
  // The file's IDAT holds exactly these rows.
  const auto png = encode_png(px.data(), static_cast<size_t>(w) * ch, w, h, ch, false, 6);
  const size_t idat_len = (size_t(png[33]) << 24) | (size_t(png[34]) << 16) | (size_t(png[35]) << 8) | png[36];
  std::vector<uint8_t> back(rows.size());
  uLongf n = back.size();
  ASSERT_EQ(uncompress(back.data(), &n, png.data() + 41, idat_len), Z_OK);
  EXPECT_EQ(back, rows);
#endif
}

TEST(Png, SizeWithinTenPercentOfLibpng) {
#if !VFPIPE_HAVE_PNG
  GTEST_SKIP() << "built without libpng";
#else
  // A photo-like frame: the synthetic scene with sensor-like noise, 640x360 RGB.
  const std::string bin = VFPIPE_BIN, dir = test::tmp_path("pngsize");
  fs::create_directories(dir);
  ASSERT_EQ(test::run_cmd(bin + " run -q -i 'synthetic=size=640x360:frames=1:format=bgr24:noise=gauss:sigma=3' -o " +
                          dir + "/%02d.png --lossless --compression-level 6 --device cpu")
                .rc,
            0);
  int w, h, ch;
  const std::vector<uint8_t> ours = read_file(dir + "/01.png");
  const std::vector<uint8_t> px = libpng_decode(ours, &w, &h, &ch);
  const std::vector<uint8_t> ref = libpng_encode(px, w, h, ch);
  RecordProperty("ours", static_cast<int>(ours.size()));
  RecordProperty("libpng", static_cast<int>(ref.size()));
  EXPECT_LT(ours.size(), ref.size() * 11 / 10) << ours.size() << " vs libpng " << ref.size();
#endif
}

TEST(LosslessSinks, PngSequenceAndY4mGzAreBitExact) {
  const std::string bin = VFPIPE_BIN, dir = test::tmp_path("lossless");
  fs::remove_all(dir);
  fs::create_directories(dir + "/frames");
  const std::string in = "'synthetic=size=67x45:frames=6:format=gray:noise=gauss:sigma=9'";
  ASSERT_EQ(test::run_cmd(bin + " run -q -i " + in + " -f median -o " + dir + "/ref.y4m").rc, 0);
  auto r = test::run_cmd(bin + " run -i " + in + " -f median -o " + dir + "/frames/%03d.png --lossless");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("PNG, DEFLATE level 1"), std::string::npos) << r.out;
  r = test::run_cmd(bin + " run -i " + in + " -f median -o " + dir + "/out.y4m.gz --compression-level 4");
  ASSERT_EQ(r.rc, 0) << r.out;
  const std::vector<uint8_t> ref = read_file(dir + "/ref.y4m");
#if VFPIPE_HAVE_ZLIB
  // gzread reads every member of the file in turn.
  gzFile g = gzopen((dir + "/out.y4m.gz").c_str(), "rb");
  ASSERT_NE(g, nullptr);
  std::vector<uint8_t> back(ref.size() + 100);
  const int got = gzread(g, back.data(), static_cast<unsigned>(back.size()));
  gzclose(g);
  back.resize(static_cast<size_t>(std::max(got, 0)));
  EXPECT_EQ(back, ref);
#endif
  const size_t header = std::string(ref.begin(), ref.end()).find('\n') + 1, fsize = 67 * 45;
#if VFPIPE_HAVE_PNG
  // Each PNG equals its frame of the Y4M output (gray, 67x45, after the 'FRAME\n' markers).
  for (int i = 0; i < 6; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "/frames/%03d.png", i + 1);
    int w, h, ch;
    const std::vector<uint8_t> px = libpng_decode(read_file(dir + name), &w, &h, &ch);
    ASSERT_EQ(ch, 1);
    const size_t at = header + static_cast<size_t>(i) * (6 + fsize) + 6;
    EXPECT_TRUE(std::equal(px.begin(), px.end(), ref.begin() + static_cast<long>(at))) << name;
  }
#endif
  EXPECT_FALSE(fs::exists(dir + "/frames/007.png"));
#if VFPIPE_HAVE_ZLIB
  // vfpipe reads its archive back: the same Y4M, bit for bit.
  r = test::run_cmd(bin + " run -q -i " + dir + "/out.y4m.gz -o " + dir + "/back.y4m");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(read_file(dir + "/back.y4m"), ref);
  // A corrupted archive is an input error, not a crash; a truncated one ends early.
  std::vector<uint8_t> gz = read_file(dir + "/out.y4m.gz");
  std::vector<uint8_t> bad = gz;
  for (size_t i = bad.size() / 2; i < bad.size() / 2 + 64; ++i) bad[i] ^= 0x5A;
  std::ofstream(dir + "/bad.y4m.gz", std::ios::binary)
      .write(reinterpret_cast<const char*>(bad.data()), static_cast<std::streamsize>(bad.size()));
  r = test::run_cmd(bin + " run -q -i " + dir + "/bad.y4m.gz -o " + dir + "/bad.y4m");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("corrupt"), std::string::npos) << r.out;
  std::ofstream(dir + "/cut.y4m.gz", std::ios::binary)
      .write(reinterpret_cast<const char*>(gz.data()), static_cast<std::streamsize>(gz.size() * 2 / 3));
  r = test::run_cmd(bin + " run -i " + dir + "/cut.y4m.gz -o " + dir + "/cut.y4m");
  EXPECT_EQ(r.rc, 1) << r.out;  // as a truncated .y4m: an error, the frames before it written
  EXPECT_NE(r.out.find("truncated Y4M"), std::string::npos) << r.out;
  const std::vector<uint8_t> cut = read_file(dir + "/cut.y4m");
  EXPECT_GT(cut.size(), header + fsize);
  EXPECT_TRUE(std::equal(cut.begin(), cut.end(), ref.begin()));
#endif
}

TEST(LosslessSinks, BadOutputsGetClearErrors) {
  const std::string bin = VFPIPE_BIN, dir = test::tmp_path("lossless_bad");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string in = " run -q -i 'synthetic=size=64x48:frames=3:format=gray' ";
  // An image sequence's missing folders are created (as the OpenCV image writer does); a
  // single .y4m.gz file's folder must exist.
  auto r = test::run_cmd(bin + in + "-o " + dir + "/missing/deeper/%04d.png --lossless");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(fs::exists(dir + "/missing/deeper/0003.png"));
  r = test::run_cmd(bin + in + "-o " + dir + "/missing2/x.y4m.gz");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("does not exist"), std::string::npos) << r.out;
  std::ofstream(dir + "/file") << "x";
  r = test::run_cmd(bin + in + "-o " + dir + "/file/%04d.png --lossless");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("is not a directory"), std::string::npos) << r.out;
  r = test::run_cmd(bin + in + "-o " + dir + "/%04d.jpg --lossless");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("lossless image sequences are PNG"), std::string::npos) << r.out;
  r = test::run_cmd(bin + in + "-o " + dir + "/x.mp4 --lossless");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("would be lossy"), std::string::npos) << r.out;
  r = test::run_cmd(bin + in + "-o " + dir + "/x.gz");
  EXPECT_EQ(r.rc, 2);
}

TEST(LosslessSinks, DiskFullKeepsEarlierFramesValid) {
  // A full disk: a 300 KiB tmpfs mounted in a private mount namespace (unshare -rm: no
  // privileges needed where user namespaces are allowed).
  const std::string bin = VFPIPE_BIN, dir = test::tmp_path("lossless_full");
  fs::remove_all(dir);
  fs::create_directories(dir + "/png");
  // Noisy 320x240 gray frames: ~70 KB per PNG and per gzip member.
  const std::string in = " run -i 'synthetic=size=320x240:frames=20:format=gray:noise=gauss:sigma=60' ";
  if (test::run_cmd("unshare -rm sh -c 'mount -t tmpfs -o size=300k tmpfs " + dir + "/png'").rc != 0)
    GTEST_SKIP() << "cannot mount a small tmpfs here (unshare -rm refused)";
  auto r = test::run_cmd("unshare -rm sh -c 'mount -t tmpfs -o size=300k tmpfs " + dir + "/png && " + bin + in + "-o " +
                         dir + "/png/%03d.png --lossless --device cpu; rc=$?; cp " + dir + "/png/* " + dir +
                         "/ 2>/dev/null; exit $rc'");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("No space left on device"), std::string::npos) << r.out;
  int complete = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_directory()) continue;
    EXPECT_EQ(e.path().extension(), ".png") << "partial file left: " << e.path();
#if VFPIPE_HAVE_PNG
    int w, h, ch;
    EXPECT_EQ(libpng_decode(read_file(e.path()), &w, &h, &ch).size(), 320u * 240u) << e.path();
#endif
    ++complete;
  }
  EXPECT_GT(complete, 0);
  EXPECT_LT(complete, 20);

  // A file-size limit does the same to one growing file: write() fails with EFBIG.
  r = test::run_cmd("ulimit -f 400; " + bin + in + "-o " + dir + "/clip.y4m.gz --device cpu");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("frames before this one are complete"), std::string::npos) << r.out;
#if VFPIPE_HAVE_ZLIB
  // The partial member was cut off: the whole file decodes, to a whole number of frames.
  gzFile g = gzopen((dir + "/clip.y4m.gz").c_str(), "rb");
  ASSERT_NE(g, nullptr);
  std::vector<uint8_t> back(20u << 20);
  const int got = gzread(g, back.data(), static_cast<unsigned>(back.size()));
  int err = 0;
  gzerror(g, &err);
  gzclose(g);
  EXPECT_EQ(err, Z_OK);
  const std::string s(back.begin(), back.begin() + std::max(got, 0));
  const size_t header = s.find('\n') + 1, frame = 6 + 320 * 240;
  ASSERT_GT(s.size(), header);
  EXPECT_EQ((s.size() - header) % frame, 0u);
  EXPECT_GT((s.size() - header) / frame, 0u);
#endif
}

// Without a GPU the lossless outputs are written by libdeflate (smaller and faster than
// vfpipe's CPU encoder); --deflate-engine vfpipe keeps vfpipe's encoder (the GPU's bytes).
// Both decode to the same frames.
TEST(LosslessSinks, CpuRunsUseLibdeflateUnlessAskedForTheReference) {
  const std::string bin = VFPIPE_BIN, dir = test::tmp_path("lossless_engines");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string in = " run --no-progress --device cpu -i 'synthetic=size=160x90:frames=3:noise=gauss:sigma=6' -o ";
  auto r = test::run_cmd(bin + in + dir + "/auto.y4m.gz");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("libdeflate"), std::string::npos) << r.out;
  r = test::run_cmd(bin + in + dir + "/ref.y4m.gz --deflate-engine vfpipe");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("vfpipe CPU reference"), std::string::npos) << r.out;
  ASSERT_EQ(test::run_cmd(bin + in + dir + "/plain.y4m").rc, 0);
  EXPECT_NE(read_file(dir + "/auto.y4m.gz"), read_file(dir + "/ref.y4m.gz"));
  for (const char* name : {"auto", "ref"})
    EXPECT_EQ(test::run_cmd("gzip -dc " + dir + "/" + name + ".y4m.gz | cmp - " + dir + "/plain.y4m").rc, 0) << name;
  // compress: libdeflate by default without a GPU, the reference on request.
  std::ofstream(dir + "/data.bin") << std::string(100000, 'a') + "vfpipe";
  r = test::run_cmd(bin + " compress --device cpu " + dir + "/data.bin -o " + dir + "/a.gz");
  EXPECT_NE(r.out.find("libdeflate"), std::string::npos) << r.out;
  r = test::run_cmd(bin + " compress --device cpu --engine vfpipe " + dir + "/data.bin -o " + dir + "/b.gz");
  EXPECT_NE(r.out.find("vfpipe CPU reference"), std::string::npos) << r.out;
  for (const char* name : {"a.gz", "b.gz"})
    EXPECT_EQ(test::run_cmd("gzip -dc " + dir + "/" + name + " | cmp - " + dir + "/data.bin").rc, 0) << name;
  fs::remove_all(dir);
}

// `vfpipe compress` streams gzip output in bounded memory: one gzip member per 32 MiB of
// input, read back whole by gzip; a zlib stream stays one stream.
TEST(Compress, LargeInputsBecomeGzipMembersInBoundedMemory) {
  const std::string bin = VFPIPE_BIN, dir = test::tmp_path("compress_big");
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    std::ofstream f(dir + "/big.bin", std::ios::binary);
    std::mt19937 rng(3);
    std::string block(1 << 20, '\0');
    for (int m = 0; m < 70; ++m) {  // 70 MiB: three members
      for (auto& c : block) c = static_cast<char>('a' + rng() % 16);
      f << block;
    }
  }
  auto r = test::run_cmd(bin + " compress --device cpu " + dir + "/big.bin -o " + dir + "/big.gz");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(test::run_cmd("gzip -dc " + dir + "/big.gz | cmp - " + dir + "/big.bin").rc, 0);
  // Members, counted by inflating one after the other.
  const std::string count =
      test::run_cmd(
          "python3 -c \"import zlib,sys\nd=open(sys.argv[1],'rb').read()\nn=0\nwhile d:\n o=zlib.decompressobj(31)\n "
          "o.decompress(d)\n d=o.unused_data\n n+=1\nprint(n)\" " +
          dir + "/big.gz")
          .out;
  const size_t members = static_cast<size_t>(std::stoul(count));
  EXPECT_GE(members, 3u);
  r = test::run_cmd(bin + " compress --device cpu --format zlib " + dir + "/big.bin -o " + dir + "/big.zz");
  ASSERT_EQ(r.rc, 0) << r.out;
  fs::remove_all(dir);
}

// `-o still.png` (no pattern) writes one image, as ffmpeg's -frames:v 1 does; an input
// with more frames is refused before the run unless -n 1 says which.
#if VFPIPE_HAVE_PNG
// libpng's reading of a PNG's pixel aspect (width / height of a pixel; 0 without pHYs).
float libpng_pixel_aspect(const std::vector<uint8_t>& png) {
  struct Src {
    const std::vector<uint8_t>* bytes;
    size_t at;
  } src{&png, 0};
  png_structp p = png_create_read_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(p);
  float aspect = -1;
  if (setjmp(png_jmpbuf(p)) == 0) {
    png_set_read_fn(p, &src, [](png_structp pp, png_bytep out, size_t n) {
      auto* s = static_cast<Src*>(png_get_io_ptr(pp));
      if (s->at + n > s->bytes->size()) png_error(pp, "truncated");
      std::memcpy(out, s->bytes->data() + s->at, n);
      s->at += n;
    });
    png_read_info(p, info);
    aspect = png_get_valid(p, info, PNG_INFO_pHYs) ? png_get_pixel_aspect_ratio(p, info) : 0;
  }
  png_destroy_read_struct(&p, &info, nullptr);
  return aspect;
}
#endif

// Anamorphic frames (32:27 pixels, from a Y4M's A field) give PNGs whose pHYs chunk says so,
// as libpng reads it; square ones get no pHYs.
TEST(LosslessSinks, PngRecordsThePixelAspect) {
#if !VFPIPE_HAVE_PNG
  GTEST_SKIP() << "built without libpng";
#else
  const std::string bin = VFPIPE_BIN, dir = test::tmp_path("png_aspect");
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* a : {"A32:27", "A1:1"}) {
    {
      std::ofstream y4m(dir + "/in.y4m", std::ios::binary);
      y4m << "YUV4MPEG2 W16 H8 F25:1 Ip " << a << " C420jpeg\nFRAME\n" << std::string(16 * 8 * 3 / 2, '\x40');
    }
    for (const std::string out : {"one.png", "%03d.png"}) {
      const auto r = test::run_cmd(bin + " run -q -y -n 1 -i " + dir + "/in.y4m --lossless -o " + dir + "/" + out);
      ASSERT_EQ(r.rc, 0) << r.out;
      const std::vector<uint8_t> png = read_file(dir + "/" + (out == "one.png" ? out : "001.png"));
      int w = 0, h = 0, ch = 0;
      EXPECT_EQ(libpng_decode(png, &w, &h, &ch).size(), 16u * 8 * 3) << a << " " << out;
      if (std::string(a) == "A1:1") {
        EXPECT_EQ(libpng_pixel_aspect(png), 0.0f) << out;
        EXPECT_EQ(std::string(png.begin() + 37, png.begin() + 41), "IDAT") << out;
      } else {
        EXPECT_FLOAT_EQ(libpng_pixel_aspect(png), 32.0f / 27.0f) << out;
      }
    }
  }
  fs::remove_all(dir);
#endif
}

TEST(LosslessSinks, SingleImageOutput) {
  const std::string bin = VFPIPE_BIN, dir = test::tmp_path("single_png");
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto r = test::run_cmd(bin + " run -q -i 'synthetic=size=64x48:frames=1' -o " + dir + "/one.png");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(fs::exists(dir + "/one.png"));
  r = test::run_cmd(bin + " run -q -i 'synthetic=size=64x48:frames=5' -o " + dir + "/first.png -n 1");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(fs::exists(dir + "/first.png"));
  r = test::run_cmd(bin + " run -q -i 'synthetic=size=64x48:frames=5' -o " + dir + "/many.png");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("holds 1 image; the input has 5 frames: add -n 1"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir + "/many.png"));
  fs::remove_all(dir);
}
