#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.hpp"
#include "cpu/convert_ops.hpp"
#include "io/y4m.hpp"
#include "test_util.hpp"

using namespace vfp;
using namespace vfp::test;

namespace {
void write_file(const std::string& p, const std::string& data) {
  std::ofstream f(p, std::ios::binary);
  f << data;
}
std::string error_of(const std::string& path) {
  try {
    Y4mSource s(path);
    HostFrame f(s.spec(), false);
    while (s.read(f)) {
    }
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
// A one-frame 4x2 file whose header has `fields` between the rate and the colorspace,
// read and written again: the source's spec and the header the writer wrote.
std::pair<FrameSpec, std::string> header_round_trip(const std::string& fields) {
  const std::string in = tmp_path("fields_in.y4m"), out = tmp_path("fields_out.y4m");
  write_file(in, "YUV4MPEG2 W4 H2 F25:1 " + fields + " C420jpeg\nFRAME\n" + std::string(4 * 2 * 3 / 2, '\x80'));
  FrameSpec spec;
  {
    Y4mSource src(in);
    spec = src.spec();
    Y4mSink sink(out);
    sink.open(spec);
    HostFrame f(spec, false);
    while (src.read(f)) sink.write(f);
    sink.close();
  }
  const std::string written = read_file(out);
  std::remove(in.c_str());
  std::remove(out.c_str());
  return {spec, written.substr(0, written.find('\n'))};
}
}  // namespace

TEST(Y4m, RoundTripAllFormatsAndOddSizes) {
  for (PixelFormat fmt : {PixelFormat::YUV420P, PixelFormat::YUV444P, PixelFormat::GRAY8, PixelFormat::YUV420P16,
                          PixelFormat::YUV444P16, PixelFormat::GRAY16})
    for (auto [w, h] : {std::pair{1, 1}, {3, 7}, {67, 45}}) {
      FrameSpec s{fmt, w, h, {30000, 1001}};
      std::string path = tmp_path("rt.y4m");
      std::vector<std::unique_ptr<HostFrame>> frames;
      {
        Y4mSink sink(path);
        sink.open(s);
        for (int i = 0; i < 3; ++i) {
          frames.push_back(std::make_unique<HostFrame>(s, false));
          fill_random(*frames.back(), static_cast<uint32_t>(i + w));
          sink.write(*frames.back());
        }
        sink.close();
      }
      Y4mSource src(path);
      EXPECT_EQ(src.spec(), s);
      EXPECT_EQ(src.spec().fps.num, 30000);
      EXPECT_EQ(src.spec().fps.den, 1001);
      HostFrame f(s, false);
      for (int i = 0; i < 3; ++i) {
        ASSERT_TRUE(src.read(f));
        EXPECT_TRUE(f.same_pixels(*frames[i])) << pix_fmt_name(fmt) << " " << w << "x" << h;
      }
      EXPECT_FALSE(src.read(f));
      std::remove(path.c_str());
    }
}

TEST(Y4m, ReadsFilesWrittenByFfmpeg) {
  struct Case {
    const char* name;
    PixelFormat fmt;
  };
  for (Case c : {Case{"yuv420p", PixelFormat::YUV420P}, Case{"yuv444p", PixelFormat::YUV444P},
                 Case{"gray", PixelFormat::GRAY8}}) {
    std::string base = std::string(VFPIPE_TEST_DATA) + "/testsrc2_67x45_" + c.name;
    Y4mSource src(base + ".y4m");
    EXPECT_EQ(src.spec().width, 67);
    EXPECT_EQ(src.spec().height, 45);
    EXPECT_EQ(src.spec().format, c.fmt);
    EXPECT_EQ(src.spec().fps.num, 25);
    std::string raw = read_file(base + ".raw");
    HostFrame f(src.spec(), false);
    size_t frame_bytes = f.layout().payload_bytes;
    ASSERT_EQ(raw.size(), 5 * frame_bytes);
    std::vector<uint8_t> packed(frame_bytes);
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(src.read(f)) << c.name << " frame " << i;
      f.store_packed(packed.data());
      EXPECT_EQ(0, std::memcmp(packed.data(), raw.data() + i * frame_bytes, frame_bytes)) << c.name << " frame " << i;
    }
    EXPECT_FALSE(src.read(f));
  }
}

namespace {
// ffmpeg's fixture `file` (.y4m and .raw, two frames of 16-bit words) read and written back
// at `bits`: each frame's samples are the raw ones widened from `bits` to the 16-bit scale,
// and the copy holds ffmpeg's payload under its colourspace `tag`.
void expect_fixture_round_trip(const char* file, PixelFormat fmt, int bits, const char* tag) {
  const std::string base = std::string(VFPIPE_TEST_DATA) + "/" + file, out = tmp_path("fixture.y4m");
  const std::string raw = read_file(base + ".raw");
  {
    Y4mSource src(base + ".y4m");
    ASSERT_EQ(src.spec().format, fmt) << file;
    Y4mSink sink(out, bits);
    sink.open(src.spec());
    HostFrame f(src.spec(), false);
    std::vector<uint8_t> packed(f.layout().payload_bytes);
    ASSERT_EQ(raw.size(), 2 * packed.size()) << file;
    for (int i = 0; i < 2; ++i) {
      ASSERT_TRUE(src.read(f)) << file;
      f.store_packed(packed.data());
      const auto* got = reinterpret_cast<const uint16_t*>(packed.data());
      const auto* want = reinterpret_cast<const uint16_t*>(raw.data() + i * packed.size());
      for (size_t k = 0; k < packed.size() / 2; ++k)
        ASSERT_EQ(got[k], conv::widen_to16(want[k], bits)) << file << " sample " << k;
      sink.write(f);
    }
    EXPECT_FALSE(src.read(f));
    sink.close();
  }
  const std::string ours = read_file(out), header = ours.substr(0, ours.find('\n'));
  EXPECT_NE(header.find(tag), std::string::npos) << header;
  std::string payload;
  for (size_t p = ours.find("FRAME\n"); p != std::string::npos; p = ours.find("FRAME\n", p + 6 + raw.size() / 2))
    payload += ours.substr(p + 6, raw.size() / 2);
  EXPECT_EQ(payload, raw) << file;
  std::remove(out.c_str());
}
}  // namespace

TEST(Y4m, SixteenBitFilesAgreeWithFfmpeg) {
  // ffmpeg's Cmono16 / C420p16 / C444p16 files read as their raw payload, and our writer
  // gives the same payload and colourspace tag. (4:2:0 at an even width: ffmpeg 5.1's Y4M
  // muxer sizes odd-width 16-bit chroma rows wrongly.)
  expect_fixture_round_trip("testsrc2_67x45_gray16le", PixelFormat::GRAY16, 16, " Cmono16 ");
  expect_fixture_round_trip("testsrc2_66x45_yuv420p16le", PixelFormat::YUV420P16, 16, " C420p16 ");
  expect_fixture_round_trip("testsrc2_67x45_yuv444p16le", PixelFormat::YUV444P16, 16, " C444p16 ");
}

// ffmpeg's 10- and 12-bit Y4M (C420p10, C444p12, Cmono10: 16-bit words holding 0..2^bits-1)
// reads as 16-bit frames widened to the 16-bit scale, as a video file's 10-bit samples are;
// written back at that depth (-pix_fmt yuv420p10le) it gives ffmpeg's payload and tag again.
TEST(Y4m, TenAndTwelveBitFilesAsFfmpegWritesThem) {
  expect_fixture_round_trip("testsrc2_66x45_yuv420p10le", PixelFormat::YUV420P16, 10, " C420p10 ");
  expect_fixture_round_trip("testsrc2_67x45_yuv444p12le", PixelFormat::YUV444P16, 12, " C444p12 ");
  expect_fixture_round_trip("testsrc2_67x45_gray10le", PixelFormat::GRAY16, 10, " Cmono10 ");
  // Through the command line: the output keeps the input's depth where it can (C420p10 in,
  // C420p10 out, as ffmpeg keeps a stream's format), and says where it cannot (PNG).
  const std::string in10 = std::string(VFPIPE_TEST_DATA) + "/testsrc2_66x45_yuv420p10le.y4m";
  const std::string out10 = tmp_path("cli10.y4m"), png = tmp_path("cli10.png");
  const CmdResult r = run_cmd(std::string(VFPIPE_BIN) + " run -q -y -i " + in10 + " -f median -o " + out10);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(read_file(out10).find(" C420p10 "), std::string::npos);
  const CmdResult p8 = run_cmd(std::string(VFPIPE_BIN) + " run -y -n 1 --no-progress -i " + in10 + " -o " + png);
  ASSERT_EQ(p8.rc, 0) << p8.out;
  EXPECT_NE(p8.out.find("the output takes 8-bit samples: the yuv420p16le frames are rounded to 8 bits"),
            std::string::npos)
      << p8.out;
  const CmdResult info = run_cmd(std::string(VFPIPE_BIN) + " info -i " + in10);
  ASSERT_EQ(info.rc, 0) << info.out;
  EXPECT_NE(info.out.find("frames:  66x45 yuv420p16le @ 25 fps SAR 10:11"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("samples: 10 bits (carried at 16)"), std::string::npos) << info.out;
  std::remove(out10.c_str());
  std::remove(png.c_str());
  // Words beyond the depth (a malformed file) are taken as its largest value, not wrapped.
  const std::string bad = tmp_path("over.y4m");
  write_file(bad, std::string("YUV4MPEG2 W2 H2 F25:1 Cmono10\nFRAME\n") + std::string(8, '\xff'));
  Y4mSource src(bad);
  HostFrame f(src.spec(), false);
  ASSERT_TRUE(src.read(f));
  EXPECT_EQ(reinterpret_cast<const uint16_t*>(f.view().row(0, 1))[1], 65535);
  std::remove(bad.c_str());
}

TEST(Y4m, WritesWhatFfmpegWrites) {
  // Our writer's frames for ffmpeg's own yuv420p file must equal that file's payload.
  std::string in = std::string(VFPIPE_TEST_DATA) + "/testsrc2_67x45_yuv420p.y4m";
  std::string out = tmp_path("copy.y4m");
  {
    Y4mSource src(in);
    Y4mSink sink(out);
    sink.open(src.spec());
    HostFrame f(src.spec(), false);
    while (src.read(f)) sink.write(f);
    sink.close();
  }
  std::string a = read_file(in), b = read_file(out);
  std::string payload_a = a.substr(a.find('\n') + 1), payload_b = b.substr(b.find('\n') + 1);
  EXPECT_EQ(payload_a, payload_b);
  EXPECT_EQ(b.rfind("YUV4MPEG2 W67 H45 F25:1 Ip A60:67 C420jpeg", 0), 0u);  // its pixels' aspect too
  std::remove(out.c_str());
}

// The header's A field (the pixels' aspect) is read and written on; unknown (A0:0) or
// malformed values are left unknown and written as square, as players take them.
TEST(Y4m, SampleAspectRatioCarriesOver) {
  const struct {
    const char* field;
    Rational want;
    const char* written;
  } cases[] = {{"A32:27", {32, 27}, "A32:27"},
               {"A0:0", {0, 1}, "A1:1"},
               {"A1:1", {1, 1}, "A1:1"},
               {"Ax:3", {0, 1}, "A1:1"},
               {"A4:-3", {0, 1}, "A1:1"}};
  for (const auto& c : cases) {
    const auto [spec, header] = header_round_trip(std::string("Ip ") + c.field);
    EXPECT_EQ(spec.sar.num, c.want.num) << c.field;
    EXPECT_EQ(spec.sar.den, c.want.den) << c.field;
    EXPECT_NE(header.find(std::string(" ") + c.written + " "), std::string::npos) << c.field << ": " << header;
  }
}

// The header's I field: top- or bottom-field-first frames are read and written so; mixed
// mode (a field order per frame) is progressive, with a warning.
TEST(Y4m, FieldOrderCarriesOver) {
  const struct {
    const char* field;
    FieldOrder want;
    const char* written;
  } cases[] = {{"It", FieldOrder::TopFirst, "It"},
               {"Ib", FieldOrder::BottomFirst, "Ib"},
               {"Ip", FieldOrder::Progressive, "Ip"},
               {"I?", FieldOrder::Progressive, "Ip"},
               {"Im", FieldOrder::Progressive, "Ip"}};
  for (const auto& c : cases) {
    const auto [spec, header] = header_round_trip(std::string(c.field) + " A1:1");
    EXPECT_EQ(spec.fields, c.want) << c.field;
    EXPECT_NE(header.find(std::string(" ") + c.written + " "), std::string::npos) << c.field << ": " << header;
  }
}

TEST(Y4m, HeaderErrors) {
  auto msg = [](const std::string& h) {
    try {
      parse_y4m_header(h, "t");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(msg("YUV4MPEG W2 H2").find("signature"), std::string::npos);
  EXPECT_NE(msg("YUV4MPEG2 W2").find("no W or H"), std::string::npos);
  EXPECT_NE(msg("YUV4MPEG2 W0 H2").find("invalid frame size"), std::string::npos);
  EXPECT_NE(msg("YUV4MPEG2 W2 H2 C422").find("unsupported Y4M colorspace 'C422'"), std::string::npos);
  EXPECT_NE(msg("YUV4MPEG2 W2 H2 C420p11").find("unsupported"), std::string::npos);
  EXPECT_NE(msg("YUV4MPEG2 W2 H2 C422p10").find("unsupported"), std::string::npos);
  EXPECT_EQ(msg("YUV4MPEG2 W2 H2 C420p10"), "");  // ffmpeg's 10-bit 4:2:0
  EXPECT_NE(msg("YUV4MPEG2 Wabc H2").find("bad width"), std::string::npos);
  EXPECT_NE(msg("YUV4MPEG2 W2 H2 F0:1").find("bad frame rate"), std::string::npos);
  EXPECT_NE(msg("YUV4MPEG2 W2 H2 Q5").find("unknown header field"), std::string::npos);
  EXPECT_NE(msg("YUV4MPEG2 W99999999 H2").find("exceeds"), std::string::npos);
  Y4mHeader ok = parse_y4m_header("YUV4MPEG2 W4 H2 F30:1 Ip A1:1 Cmono XCOLORRANGE=FULL", "t");
  EXPECT_EQ(ok.spec.format, PixelFormat::GRAY8);
  EXPECT_EQ(parse_y4m_header("YUV4MPEG2 W4 H2", "t").spec.format, PixelFormat::YUV420P);
}

TEST(Y4m, MalformedStreamsGiveClearErrors) {
  std::string good = read_file(std::string(VFPIPE_TEST_DATA) + "/testsrc2_67x45_gray.y4m");
  std::string p = tmp_path("bad.y4m");
  // Truncated in the middle of frame 2's pixels.
  size_t header = good.find('\n') + 1;
  size_t frame = 6 + 67 * 45;
  write_file(p, good.substr(0, header + 2 * frame + 100));
  EXPECT_NE(error_of(p).find("truncated Y4M: frame 2 has 94 of 3015 bytes"), std::string::npos) << error_of(p);
  // Truncated inside a FRAME marker.
  write_file(p, good.substr(0, header + frame + 3));
  EXPECT_NE(error_of(p).find("incomplete frame header at frame 1"), std::string::npos) << error_of(p);
  // Corrupt marker.
  std::string bad = good;
  bad[header + frame] = 'X';
  write_file(p, bad);
  EXPECT_NE(error_of(p).find("expected 'FRAME' at frame 1"), std::string::npos);
  // Empty file, garbage, missing file, header without newline.
  write_file(p, "");
  EXPECT_NE(error_of(p).find("empty input"), std::string::npos);
  write_file(p, std::string(10000, 'A'));
  EXPECT_NE(error_of(p).find("not a valid Y4M"), std::string::npos);
  write_file(p, "YUV4MPEG2 W2 H2");
  EXPECT_NE(error_of(p).find("not a valid Y4M"), std::string::npos);
  EXPECT_NE(error_of(tmp_path("does-not-exist.y4m")).find("cannot open input"), std::string::npos);
  // A clean stream with zero frames is not an error.
  write_file(p, "YUV4MPEG2 W2 H2 C420jpeg\n");
  EXPECT_EQ(error_of(p), "");
  std::remove(p.c_str());
}

TEST(Y4m, FuzzedHeadersNeverCrash) {
  // Random mutations of a valid stream: each must either parse or throw vfp::Error.
  std::string good = read_file(std::string(VFPIPE_TEST_DATA) + "/testsrc2_67x45_yuv420p.y4m");
  std::string p = tmp_path("fuzz.y4m");
  std::mt19937 rng(42);
  for (int iter = 0; iter < 300; ++iter) {
    std::string s = good.substr(0, 200 + rng() % 9000);
    int edits = 1 + rng() % 4;
    for (int e = 0; e < edits; ++e) {
      size_t at = rng() % 120;
      if (at < s.size()) s[at] = static_cast<char>(rng() % 256);
    }
    write_file(p, s);
    try {
      Y4mSource src(p);
      HostFrame f(src.spec(), false);
      while (src.read(f)) {
      }
    } catch (const Error&) {
    }
  }
  std::remove(p.c_str());
}

// A reader whose constructor throws (empty or bad header, plain or gzip) closes what it
// opened: the process's open descriptors do not grow over many failed opens.
TEST(Y4m, FailedOpenLeaksNothing) {
  const std::string empty = tmp_path("empty.y4m"), bad = tmp_path("bad.y4m"), empty_gz = tmp_path("empty.y4m.gz");
  std::ofstream(empty).close();
  std::ofstream(bad) << "YUV4MPEG2 W0 H0\n";
  std::ofstream(empty_gz).close();
  std::vector<std::string> paths{empty, bad};
#if VFPIPE_HAVE_ZLIB
  paths.push_back(empty_gz);
#endif
  const size_t before = open_descriptor_count();
  for (int i = 0; i < 50; ++i)
    for (const auto& p : paths) EXPECT_THROW(Y4mSource s(p), Error) << p;
  EXPECT_EQ(open_descriptor_count(), before);
  for (const auto& p : {empty, bad, empty_gz}) std::remove(p.c_str());
}
