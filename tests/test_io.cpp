#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>

#include "core/error.hpp"
#include "core/filter_parser.hpp"
#include "cpu/convert.hpp"
#include "io/open.hpp"
#include "io/rate.hpp"
#include "pipeline/engine.hpp"
#include "test_util.hpp"

using namespace vfp;
using namespace vfp::test;

namespace {
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Io, SourceDispatchAndErrors) {
  EXPECT_NE(error_of([] { open_source("", {}); }).find("no input"), std::string::npos);
  EXPECT_NE(error_of([] { open_source(tmp_path("missing.mp4"), {}); }).find("not found"), std::string::npos);
  EXPECT_NE(error_of([] { open_source(tmp_path("missing.y4m"), {}); }).find("cannot open input"), std::string::npos);
  auto s = open_source("synthetic=size=8x8:frames=2", {});
  EXPECT_EQ(s->spec().width, 8);
  EXPECT_EQ(s->frame_count(), 2);
  auto y = open_source(std::string(VFPIPE_TEST_DATA) + "/testsrc2_67x45_gray.y4m", {});
  EXPECT_EQ(y->spec().format, PixelFormat::GRAY8);
}

// -ss / -t / -to on inputs without timestamps (Y4M, the synthetic source): frame k is at
// k / fps, kept from the start on and before start + duration: the same pixels as the
// frames at those positions; past the end: nothing.
TEST(Io, StartAndDurationCountFramesWhereThereAreNoTimestamps) {
  const std::string y4m = tmp_path("window.y4m");
  ASSERT_EQ(run_cmd(std::string(VFPIPE_BIN) + " run -i 'synthetic=size=16x8:frames=50:rate=25' -o " + y4m +
                    " -y --device cpu")
                .rc,
            0);
  const auto frames_of = [](const std::string& spec, const SourceOptions& o) {
    auto src = open_source(spec, o);
    std::vector<std::unique_ptr<HostFrame>> out;
    for (;;) {
      auto f = std::make_unique<HostFrame>(src->spec(), false);
      if (!src->read(*f)) break;
      out.push_back(std::move(f));
    }
    return std::make_pair(src->frame_count(), std::move(out));
  };
  const auto [all_n, all] = frames_of(y4m, {});
  ASSERT_EQ(all.size(), 50u);
  struct Window {
    double start, duration;
    size_t first, count;
  };
  for (const Window& w : {Window{1.0, 0.5, 25, 13}, Window{0, 0.04, 0, 1}, Window{0.41, -1, 11, 39},
                          Window{0.5, 0, 13, 0}, Window{5, 1, 50, 0}, Window{1.9, 10, 48, 2}}) {
    SourceOptions o;
    o.start = w.start, o.duration = w.duration;
    for (const std::string& spec : {y4m, std::string("synthetic=size=16x8:frames=50:rate=25")}) {
      // A start past a known end is refused (a source that cannot count just ends).
      if (w.first >= 50 && spec != y4m) {
        EXPECT_THROW(frames_of(spec, o), Error) << spec << " -ss " << w.start;
        continue;
      }
      const auto [n, got] = frames_of(spec, o);
      ASSERT_EQ(got.size(), w.count) << spec << " -ss " << w.start << " -t " << w.duration;
      if (all_n >= 0 || spec != y4m) EXPECT_EQ(n, static_cast<int64_t>(w.count)) << spec;  // where it is known
      if (spec == y4m)
        for (size_t k = 0; k < got.size(); ++k) EXPECT_TRUE(got[k]->same_pixels(*all[w.first + k])) << k;
    }
  }
  // The CLI: run and mmp encode take FFmpeg's spellings.
  const std::string out = tmp_path("window_out.y4m");
  const auto r = run_cmd(std::string(VFPIPE_BIN) + " run -i " + y4m + " -ss 1 -to 1.5 -o " + out + " -y --device cpu");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(frames_of(out, {}).second.size(), 13u);
  const auto m = run_cmd(std::string(VFPIPE_BIN) + " mmp encode " + y4m + " -ss 0.4 -t 0.2 -o " + tmp_path("w.mmp") +
                         " -y --device cpu");
  ASSERT_EQ(m.rc, 0) << m.out;
  EXPECT_NE(m.out.find(": 5 frames 16x8"), std::string::npos) << m.out;
  for (const auto& p : {y4m, out, tmp_path("w.mmp")}) std::filesystem::remove(p);
}

TEST(Io, SinkDispatchAndErrors) {
  EXPECT_EQ(open_sink("", {})->describe(), "null");
  EXPECT_EQ(open_sink("null", {})->describe(), "null");
  auto bad = open_sink("/nonexistent-dir/x.y4m", {});
  EXPECT_NE(error_of([&] {
              bad->open({PixelFormat::GRAY8, 4, 4, {25, 1}});
            }).find("cannot open output"),
            std::string::npos);
  if (have_opencv()) {
    EXPECT_NE(error_of([] { open_sink(tmp_path("x.unknownext"), {}); }).find("unknown output type"), std::string::npos);
    EXPECT_NE(error_of([] { open_sink(tmp_path("x_%d_%d.png"), {}); }).find("bad image pattern"), std::string::npos);
  } else {
    // Without OpenCV image sequences are vfpipe's PNG; video files need libav.
    EXPECT_NE(error_of([] { open_sink(tmp_path("x_%06d.jpg"), {}); }).find("image sequences are PNG"),
              std::string::npos);
    if (!VFPIPE_HAVE_LIBAV)
      EXPECT_NE(error_of([] { open_sink(tmp_path("x.mp4"), {}); }).find("needs OpenCV"), std::string::npos);
  }
}

// No output destroys a file without being asked: an existing output file of any type (Y4M,
// .y4m.gz, one PNG, a stage's bitstream, compress's output) needs -y and -n keeps it, as in
// ffmpeg; an output that is the input's own file is refused even with -y, before anything
// is written (it would be truncated before its frames are read).
TEST(Io, OutputsNeverDestroyAFileUnasked) {
  const std::string bin = VFPIPE_BIN, dir = tmp_path("overwrite");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string in = dir + "/in.y4m", out = dir + "/out.y4m", gz = dir + "/out.y4m.gz", png = dir + "/one.png";
  ASSERT_EQ(run_cmd(bin + " run -q --device cpu -i synthetic=size=48x32:frames=30 -o " + in).rc, 0);
  const std::string before = read_file(in);
  ASSERT_GT(before.size(), 30u * 48 * 32);
  const std::string run = bin + " run -q --device cpu -i " + in + " -f median";
  const std::string leaf = std::filesystem::path(dir).filename().string();
  for (const std::string& same : {in, dir + "/./in.y4m", dir + "/../" + leaf + "/in.y4m"}) {
    for (const char* flag : {"", " -y"}) {
      const CmdResult r = run_cmd(run + " -o " + same + flag);
      EXPECT_EQ(r.rc, 2) << same << flag;
      EXPECT_NE(r.out.find("is the input"), std::string::npos) << r.out;
    }
  }
  EXPECT_EQ(read_file(in), before);
  // Every single-file type: refused, kept with -n, replaced with -y.
  for (const std::string& o : {out, gz, png}) {
    const std::string lim = o == png ? " -n 1" : "";
    ASSERT_EQ(run_cmd(run + lim + " -o " + o).rc, 0) << o;
    std::ofstream(o, std::ios::trunc) << "keep";
    CmdResult r = run_cmd(run + lim + " -o " + o);
    EXPECT_EQ(r.rc, 2) << o;
    EXPECT_NE(r.out.find("exists: add -y"), std::string::npos) << r.out;
    r = run_cmd(run + lim + " -o " + o + " --no-overwrite");
    EXPECT_EQ(r.rc, 1) << o;
    EXPECT_EQ(read_file(o), "keep");
    EXPECT_EQ(run_cmd(run + lim + " -o " + o + " -y").rc, 0) << o;
    EXPECT_NE(read_file(o), "keep");
  }
  // A stage's own file (the mmp stage's bitstream) follows the same rules.
  const std::string mmp = dir + "/s.mmp", stage = bin + " run -q --device cpu -i " + in + " -n 1 -o null -f ";
  std::ofstream(mmp, std::ios::trunc) << "keep";
  CmdResult r = run_cmd(stage + "mmp=lambda=40:file=" + mmp);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("exists: add -y"), std::string::npos) << r.out;
  EXPECT_EQ(read_file(mmp), "keep");
  r = run_cmd(stage + "mmp=lambda=40:file=" + in + " -y");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("is the input"), std::string::npos) << r.out;
  EXPECT_EQ(read_file(in), before);
  EXPECT_EQ(run_cmd(stage + "mmp=lambda=40:file=" + mmp + " -y").rc, 0);
  EXPECT_NE(read_file(mmp), "keep");
  r = run_cmd(bin + " run -q --device cpu -i " + in + " -n 1 -f mmp=lambda=40:file=" + dir + "/both.y4m -o " + dir +
              "/./both.y4m");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("is both the output and the file mmp writes"), std::string::npos) << r.out;
  // The run's reports are written over what is there, but never over the input.
  for (const std::string& opt : {" --report ", " --progress-file "}) {
    r = run_cmd(run + " -o null" + opt + in);
    EXPECT_EQ(r.rc, 2) << opt;
    EXPECT_NE(r.out.find("is the input"), std::string::npos) << r.out;
  }
  const std::string json_in = dir + "/p.json";
  std::filesystem::copy_file(in, json_in);
  r = run_cmd(bin + " profile -q --device cpu -i " + json_in + " --prefix " + dir + "/p");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("is the input"), std::string::npos) << r.out;
  EXPECT_EQ(read_file(in), before);
  EXPECT_EQ(read_file(json_in), before);
  // mmp encode / decode and compress.
  r = run_cmd(bin + " mmp decode " + mmp + " -o " + mmp + " -y");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("is the input"), std::string::npos) << r.out;
  r = run_cmd(bin + " mmp decode " + mmp + " -o " + out);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("exists: add -y"), std::string::npos) << r.out;
  r = run_cmd(bin + " compress " + in + " -o " + in + " -y");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("is the input"), std::string::npos) << r.out;
  EXPECT_EQ(read_file(in), before);
  ASSERT_EQ(run_cmd(bin + " compress " + in + " -d cpu").rc, 0);
  r = run_cmd(bin + " compress " + in + " -d cpu");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("exists: add -y"), std::string::npos) << r.out;
  EXPECT_EQ(run_cmd(bin + " compress " + in + " -d cpu -n").rc, 1);
  EXPECT_EQ(run_cmd(bin + " compress " + in + " -d cpu -y").rc, 0);
  // The same image pattern in and out is the same files, whether or not they exist yet.
  EXPECT_NE(
      error_of([&] { check_output_is_not_input(dir + "/f/%04d.png", dir + "/f/../f/%04d.png"); }).find("is the input"),
      std::string::npos);
  EXPECT_EQ(error_of([&] { check_output_is_not_input(dir + "/f/%04d.png", dir + "/g/%04d.png"); }), "");
  EXPECT_EQ(error_of([&] { check_output_is_not_input("-", "-"); }), "");
  EXPECT_EQ(error_of([&] { check_output_is_not_input(in, "null"); }), "");
  std::filesystem::remove_all(dir);
}

TEST(Io, ImageSequenceRoundTripIsLossless) {
  if (!have_opencv()) GTEST_SKIP() << "built without OpenCV";
  std::string dir = tmp_path("seq");
  std::filesystem::remove_all(dir);
  FrameSpec s{PixelFormat::BGR24, 31, 17, {25, 1}};
  std::vector<std::unique_ptr<HostFrame>> frames;
  {
    auto sink = open_sink(dir + "/f_%03d.png", {});
    sink->open(s);
    for (int i = 0; i < 4; ++i) {
      frames.push_back(std::make_unique<HostFrame>(s, false));
      fill_random(*frames.back(), static_cast<uint32_t>(i));
      sink->write(*frames.back());
    }
    sink->close();
  }
  EXPECT_TRUE(std::filesystem::exists(dir + "/f_001.png"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/f_004.png"));
  for (const std::string& pattern : {dir + "/f_%03d.png", dir + "/*.png"}) {
    auto src = open_source(pattern, {});
    EXPECT_EQ(src->spec(), s);
    EXPECT_EQ(src->frame_count(), 4);
    HostFrame f(s, false);
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(src->read(f));
      EXPECT_TRUE(f.same_pixels(*frames[i])) << pattern << " " << i;
    }
    EXPECT_FALSE(src->read(f));
  }
  EXPECT_NE(error_of([&] { open_source(dir + "/none_%03d.png", {}); }).find("no image matches"), std::string::npos);
  EXPECT_NE(error_of([&] { open_source(dir, {}); }).find("is a directory"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Io, SixteenBitGrayImagesRoundTrip) {
  // gray16le frames go to PNG (and TIFF) as 16-bit gray and come back bit for bit as gray16le;
  // formats without 16 bits (JPEG) do not offer it, so the chain converts to 8 bits first.
  if (!have_opencv()) GTEST_SKIP() << "built without OpenCV";
  const std::string dir = tmp_path("seq16");
  std::filesystem::remove_all(dir);
  FrameSpec s{PixelFormat::GRAY16, 33, 19, {25, 1}};
  for (const char* ext : {"png", "tif"}) {
    std::vector<std::unique_ptr<HostFrame>> frames;
    const std::string pattern = dir + "/g_%02d." + ext;
    {
      auto sink = open_sink(pattern, {});
      const auto acc = sink->accepted_formats();
      ASSERT_NE(std::find(acc.begin(), acc.end(), PixelFormat::GRAY16), acc.end()) << ext;
      sink->open(s);
      for (int i = 0; i < 2; ++i) {
        frames.push_back(std::make_unique<HostFrame>(s, false));
        fill_random(*frames.back(), static_cast<uint32_t>(i + 40));
        sink->write(*frames.back());
      }
      sink->close();
    }
    if (std::string(ext) == "png") {  // IHDR: bit depth 16, colour type 0 (gray)
      std::ifstream f(dir + "/g_01.png", std::ios::binary);
      std::string png((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      ASSERT_GT(png.size(), 26u);
      EXPECT_EQ(static_cast<int>(png[24]), 16);
      EXPECT_EQ(static_cast<int>(png[25]), 0);
    }
    auto src = open_source(pattern, {});
    ASSERT_EQ(src->spec(), s) << ext;
    HostFrame f(s, false);
    for (int i = 0; i < 2; ++i) {
      ASSERT_TRUE(src->read(f));
      EXPECT_TRUE(f.same_pixels(*frames[static_cast<size_t>(i)])) << ext << " " << i;
    }
    std::filesystem::remove_all(dir);
  }
  const auto jpg = open_sink(dir + "/g_%02d.jpg", {})->accepted_formats();
  EXPECT_EQ(std::find(jpg.begin(), jpg.end(), PixelFormat::GRAY16), jpg.end());
}

TEST(Io, VideoFileRoundTrip) {
  if (!have_opencv()) GTEST_SKIP() << "built without OpenCV";
  std::string path = tmp_path("clip.avi");
  FrameSpec s{PixelFormat::BGR24, 64, 48, {25, 1}};
  {
    auto sink = open_sink(path, {});  // .avi -> MJPG
    sink->open(s);
    auto src = open_source("synthetic=size=64x48:frames=12:format=bgr24", {});
    HostFrame f(s, false);
    while (src->read(f)) sink->write(f);
    sink->close();
  }
  auto src = open_source(path, {});
  EXPECT_EQ(src->spec().width, 64);
  EXPECT_EQ(src->spec().height, 48);
  // FFmpeg's libraries keep the file's own format (the BGR frames were encoded as YUV);
  // OpenCV's reader hands out BGR.
  EXPECT_EQ(src->spec().format, VFPIPE_HAVE_LIBAV ? PixelFormat::YUV420P : PixelFormat::BGR24);
  EXPECT_EQ(src->frame_count(), 12);
  HostFrame f(src->spec(), false);
  int n = 0;
  while (src->read(f)) ++n;
  EXPECT_EQ(n, 12);
  std::remove(path.c_str());
}

TEST(Io, CorruptVideoIsRejected) {
  if (!have_opencv()) GTEST_SKIP() << "built without OpenCV";
  std::string path = tmp_path("corrupt.mp4");
  {
    std::ofstream f(path, std::ios::binary);
    f << std::string(5000, '\x42');
  }
  std::string msg = error_of([&] { open_source(path, {}); });
  EXPECT_FALSE(msg.empty());
  EXPECT_NE(msg.find(path), std::string::npos);
  std::remove(path.c_str());
}

// A video output that could not be written completely (a full disk, a file size limit)
// is an error with status 1, never "success" with an unplayable file.
TEST(Io, LostVideoWritesAreErrors) {
  if (!have_opencv()) GTEST_SKIP() << "built without OpenCV";
  namespace fs = std::filesystem;
  const std::string dir = tmp_path("full_outputs");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string bin = VFPIPE_BIN;
  const std::string in = " run -q --device cpu -i synthetic=size=320x240:frames=40:noise=gauss -o ";
  for (const char* ext : {"avi", "mkv", "y4m", "y4m.gz"}) {
    const std::string out = dir + "/full." + ext;
    fs::create_symlink("/dev/full", out);
    CmdResult r = run_cmd(bin + " run -y" + in.substr(4) + out);  // -y: the link exists
    EXPECT_EQ(r.rc, 1) << ext << ": " << r.out;
    EXPECT_NE(r.out.find("vfpipe: error:"), std::string::npos) << r.out;
  }
  for (const char* ext : {"mp4", "mkv", "avi"}) {
    const std::string out = dir + "/limited." + ext;
    CmdResult r = run_cmd("ulimit -f 100; " + bin + in + out);  // 50 KB: the file cannot hold 40 noisy frames
    EXPECT_EQ(r.rc, 1) << ext << ": " << r.out;
    // FFmpeg's muxer reports the failed write; OpenCV's writer does not, and vfpipe reads the
    // file back to find it.
    const bool said = VFPIPE_HAVE_LIBAV ? r.out.find("File too large") != std::string::npos
                                        : r.out.find("is unreadable after 40 frames") != std::string::npos;
    EXPECT_TRUE(said) << r.out;
    EXPECT_EQ(r.out.find("@ 0x"), std::string::npos) << "libav's own log leaked: " << r.out;
  }
  CmdResult ok = run_cmd(bin + in + dir + "/ok.mkv");
  EXPECT_EQ(ok.rc, 0) << ok.out;
  fs::remove_all(dir);
}

// -r's slots: the nearest slot, ties to the earlier one, repeats for the slots no frame
// took, drops for a slot taken twice, and the last frame lasting its duration.
TEST(Io, RateSlotsDuplicateAndDrop) {
  auto run = [](Rational in, Rational out, int frames, int64_t* dup) {
    RateSlots s(out);
    std::vector<int64_t> slots;
    int64_t repeats = 0, slot = 0;
    for (int i = 0; i < frames; ++i) {
      const double t = static_cast<double>(i) * in.den / in.num;
      if (s.place(t, &repeats, &slot)) {
        for (int64_t r = 0; r < repeats; ++r) slots.push_back(-1);  // the previous frame again
        slots.push_back(i);
      }
    }
    const int64_t more = s.finish(double(in.den) / in.num);
    for (int64_t r = 0; r < more; ++r) slots.push_back(-1);
    *dup = static_cast<int64_t>(std::count(slots.begin(), slots.end(), -1));
    return slots;
  };
  int64_t dup = 0;
  std::vector<int64_t> down = run({50, 1}, {25, 1}, 100, &dup);  // the even frames
  ASSERT_EQ(down.size(), 50u);
  for (size_t k = 0; k < down.size(); ++k) EXPECT_EQ(down[k], static_cast<int64_t>(2 * k));
  EXPECT_EQ(dup, 0);
  EXPECT_EQ(run({25, 1}, {50, 1}, 50, &dup).size(), 100u);  // each frame twice
  EXPECT_EQ(dup, 50);
  EXPECT_EQ(run({25, 1}, {30, 1}, 50, &dup).size(), 60u);  // 2 s either way
  EXPECT_EQ(dup, 10);
  EXPECT_EQ(run({30000, 1001}, {25, 1}, 300, &dup).size(), 250u);
}

// -r on outputs without timestamps of their own (Y4M, image sequences): frames at the new
// rate, the header says it.
TEST(Io, OutputRateOfY4mAndImageSequences) {
  const std::string bin = VFPIPE_BIN, all = tmp_path("rate_all.y4m"), half = tmp_path("rate_half.y4m");
  const std::string src = " run -q -y -i synthetic=size=33x17:rate=50:frames=100";
  ASSERT_EQ(run_cmd(bin + src + " -o " + all).rc, 0);
  const CmdResult r = run_cmd(bin + src + " -r 25 -o " + half);
  ASSERT_EQ(r.rc, 0) << r.out;
  auto frames = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::string header;
    std::getline(f, header);
    std::vector<std::string> out;
    const size_t bytes = 33 * 17 + 2 * (17 * 9);
    std::string line;
    while (std::getline(f, line)) {
      std::string payload(bytes, '\0');
      if (!f.read(payload.data(), static_cast<std::streamsize>(bytes))) break;
      out.push_back(payload);
    }
    out.insert(out.begin(), header);
    return out;
  };
  const std::vector<std::string> a = frames(all), h = frames(half);
  EXPECT_NE(h[0].find(" F25:1 "), std::string::npos) << h[0];
  ASSERT_EQ(a.size(), 101u);
  ASSERT_EQ(h.size(), 51u);
  for (size_t k = 1; k < h.size(); ++k) EXPECT_EQ(h[k], a[2 * (k - 1) + 1]) << k;  // the even frames
  // Up: an image sequence at 100 frames/s from 50 holds every frame twice.
  const std::string dir = tmp_path("rate_png");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ASSERT_EQ(
      run_cmd(bin + " run -q -y -i synthetic=size=33x17:rate=50:frames=10 -r 100 --lossless -o " + dir + "/%04d.png")
          .rc,
      0);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator{}), 20);
  std::filesystem::remove_all(dir);
  for (const auto& p : {all, half}) std::remove(p.c_str());
}
