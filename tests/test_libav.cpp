// Video files through FFmpeg's libraries (io/libav.cpp), checked with the ffmpeg and ffprobe
// programs: decoding equals ffmpeg's, the audio, colour tags, metadata and per-frame
// timestamps of the input reach the output, 10-bit stays 10-bit and exact, -ss/-t/-an/-y/-n
// and the encoder options behave as in ffmpeg, and a truncated input keeps its frames and fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "cpu/convert.hpp"
#include "io/open.hpp"
#include "test_util.hpp"

using namespace vfp;
using namespace vfp::test;

namespace {
const std::string kBin = VFPIPE_BIN;

bool have_ffmpeg() { return run_cmd("ffmpeg -version && ffprobe -version").rc == 0; }

#define REQUIRE_LIBAV()                                                                      \
  do {                                                                                       \
    if (!VFPIPE_HAVE_LIBAV) GTEST_SKIP() << "built without FFmpeg's libraries";              \
    if (!have_ffmpeg()) GTEST_SKIP() << "the ffmpeg and ffprobe programs are not installed"; \
  } while (0)

// A file made by ffmpeg; fails the test if it cannot.
std::string make(const std::string& name, const std::string& args) {
  const std::string p = tmp_path(name);
  const CmdResult r = run_cmd("ffmpeg -v error -y " + args + " " + p);
  EXPECT_EQ(r.rc, 0) << r.out;
  return p;
}
std::string probe(const std::string& file, const std::string& what) {
  return run_cmd("ffprobe -v error " + what + " -of csv=p=0 " + file).out;
}
std::string md5_of_raw(const std::string& file, const std::string& pix_fmt) {
  return run_cmd("ffmpeg -v error -i " + file + " -f rawvideo -pix_fmt " + pix_fmt + " - | md5sum").out;
}
// A 4 s 25 fps 320x240 H.264 clip with AAC audio, BT.709 tags and a title.
std::string av_clip() {
  return make("av_clip.mp4",
              "-f lavfi -i testsrc2=size=320x240:rate=25:duration=4 -f lavfi -i sine=frequency=440:duration=4 "
              "-c:v libx264 -pix_fmt yuv420p -color_primaries bt709 -color_trc bt709 -colorspace bt709 "
              "-color_range tv -c:a aac -metadata title=vfpipe-test -metadata:s:a:0 language=eng");
}
}  // namespace

TEST(Libav, DecodingEqualsFfmpegsForEachFormat) {
  REQUIRE_LIBAV();
  for (const char* fmt : {"yuv420p", "yuv444p", "gray"}) {
    const std::string in =
        make(std::string("dec_") + fmt + ".mkv",
             "-f lavfi -i testsrc2=size=161x97:rate=25:duration=1 -c:v ffv1 -pix_fmt " + std::string(fmt));
    const std::string a = tmp_path("dec_pipe.y4m"), b = tmp_path("dec_direct.y4m");
    ASSERT_EQ(run_cmd("ffmpeg -v error -i " + in + " -f yuv4mpegpipe -strict -1 - | " + kBin +
                      " run -q -i - -f median=radius=2 -o " + a)
                  .rc,
              0);
    const CmdResult r = run_cmd(kBin + " run -q -i " + in + " -f median=radius=2 -o " + b);
    ASSERT_EQ(r.rc, 0) << r.out;
    // The same frames (the headers may differ in the colour-range tag).
    EXPECT_EQ(run_cmd("bash -c 'cmp <(sed 1d " + a + ") <(sed 1d " + b + ")'").rc, 0) << fmt;
    for (const auto& p : {in, a, b}) std::remove(p.c_str());
  }
}

// Anamorphic video keeps its pixels' aspect through every kind of output; -aspect sets the
// display ratio.
TEST(Libav, SampleAspectRatioCarriesOver) {
  REQUIRE_LIBAV();
  const std::string in =
      make("sar_in.mp4", "-f lavfi -i testsrc2=size=160x120:rate=25:duration=1,setsar=32/27 -c:v libx264");
  ASSERT_EQ(probe(in, "-show_entries stream=sample_aspect_ratio"), "32:27\n");
  // WebM keeps the display size in whole pixels (190x120 here), as ffmpeg's own WebM does.
  const std::pair<const char*, const char*> outs[] = {
      {".mp4", "32:27,128:81\n"}, {".mkv", "32:27,128:81\n"}, {".mov", "32:27,128:81\n"}, {".webm", "19:16,19:12\n"}};
  for (const auto& [ext, want] : outs) {
    const std::string out = tmp_path(std::string("sar_out") + ext);
    const CmdResult r = run_cmd(kBin + " run -y -i " + in + " -f median -o " + out);
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_NE(r.out.find("160x120 yuv420p @ 25 fps SAR 32:27"), std::string::npos) << r.out;
    EXPECT_EQ(probe(out, "-show_entries stream=sample_aspect_ratio,display_aspect_ratio"), want) << ext;
    std::remove(out.c_str());
  }
  // Through a Y4M file and back.
  const std::string y4m = tmp_path("sar.y4m"), back = tmp_path("sar_back.mkv");
  ASSERT_EQ(run_cmd(kBin + " run -q -y -i " + in + " -o " + y4m).rc, 0);
  EXPECT_NE(run_cmd("head -c 80 " + y4m).out.find(" A32:27 "), std::string::npos);
  ASSERT_EQ(run_cmd(kBin + " run -q -y -i " + y4m + " -o " + back).rc, 0);
  EXPECT_EQ(probe(back, "-show_entries stream=sample_aspect_ratio"), "32:27\n");
  // -aspect: the display ratio, the pixels' aspect derived from the frame size.
  ASSERT_EQ(run_cmd(kBin + " run -q -y -i " + in + " -aspect 16:9 -o " + back).rc, 0);
  EXPECT_EQ(probe(back, "-show_entries stream=sample_aspect_ratio,display_aspect_ratio"), "4:3,16:9\n");
  ASSERT_EQ(run_cmd(kBin + " run -q -y -i " + in + " -aspect 2.39 -o " + back).rc, 0);
  EXPECT_EQ(probe(back, "-show_entries stream=display_aspect_ratio"), "239:100\n");
  const CmdResult bad = run_cmd(kBin + " run -q -y -i " + in + " -aspect wide -o " + back);
  EXPECT_EQ(bad.rc, 2) << bad.out;
  EXPECT_NE(bad.out.find("-aspect: expected a display aspect ratio"), std::string::npos) << bad.out;
  for (const auto& p : {in, y4m, back}) std::remove(p.c_str());
}

// Interlaced video keeps its field order through video files and Y4M, as ffmpeg tags it;
// the encoder codes fields when asked (libx264: flags=+ildct).
TEST(Libav, FieldOrderCarriesOver) {
  REQUIRE_LIBAV();
  const std::string in = make("fields_in.mkv",
                              "-f lavfi -i testsrc2=size=160x120:rate=25:duration=1 -c:v libx264 -flags +ilme+ildct "
                              "-top 1");
  ASSERT_EQ(probe(in, "-show_entries stream=field_order"), "tt\n");
  const std::string mkv = tmp_path("fields_out.mkv"), y4m = tmp_path("fields.y4m"), mp4 = tmp_path("fields.mp4");
  CmdResult r = run_cmd(kBin + " run -y -i " + in + " -f median -o " + mkv);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("@ 25 fps interlaced (top field first)"), std::string::npos) << r.out;
  EXPECT_EQ(probe(mkv, "-show_entries stream=field_order"), "tt\n");
  ASSERT_EQ(run_cmd(kBin + " run -q -y -i " + in + " -o " + y4m).rc, 0);
  EXPECT_NE(run_cmd("head -c 40 " + y4m).out.find(" It "), std::string::npos);
  ASSERT_EQ(run_cmd(kBin + " run -q -y -i " + y4m + " --encoder-opt flags=+ilme+ildct -o " + mp4).rc, 0);
  EXPECT_EQ(probe(mp4, "-show_entries stream=field_order"), "tt\n");
  for (const auto& p : {in, mkv, y4m, mp4}) std::remove(p.c_str());
}

// HDR10's metadata (the mastering display, the light levels) reaches the output's container
// whether the input had it in HEVC's own stream (x265's SEI, seen only by the decoder) or in
// its container; an output that cannot hold HDR says so.
TEST(Libav, HdrMetadataCarriesOver) {
  REQUIRE_LIBAV();
  if (run_cmd("ffmpeg -hide_banner -encoders").out.find("libx265") == std::string::npos)
    GTEST_SKIP() << "this ffmpeg has no libx265 to make an HDR10 input";
  const std::string in = make("hdr_in.mkv",
                              "-f lavfi -i testsrc2=size=160x120:rate=10:duration=0.5 -c:v libx265 -x265-params "
                              "'log-level=error:hdr10=1:master-display=G(13250,34500)B(7500,3000)R(34000,16000)"
                              "WP(15635,16450)L(10000000,1):max-cll=1000,400' -pix_fmt yuv420p10le "
                              "-color_primaries bt2020 -color_trc smpte2084 -colorspace bt2020nc");
  const std::string fields = "-select_streams v -show_entries stream_side_data=red_x,max_luminance,max_content";
  ASSERT_EQ(probe(in, fields), "\n");  // only in the HEVC stream
  // `vfpipe info` reads it from the first frame.
  const CmdResult info = run_cmd(kBin + " info " + in);
  ASSERT_EQ(info.rc, 0) << info.out;
  EXPECT_NE(info.out.find("HDR:     PQ transfer; mastering display 0.0001-1000 cd/m2"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("content light max 1000 cd/m2, frame average 400 cd/m2"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("samples: 10 bits (carried at 16)"), std::string::npos) << info.out;
  const std::string mkv = tmp_path("hdr_out.mkv"), mp4 = tmp_path("hdr_out.mp4"), y4m = tmp_path("hdr_out.y4m");
  const CmdResult m = run_cmd(kBin + " run -y --no-progress -i " + in + " -f median -o " + mkv);
  ASSERT_EQ(m.rc, 0) << m.out;
  EXPECT_EQ(m.out.find("works on 8-bit samples"), std::string::npos) << m.out;
  EXPECT_EQ(probe(mkv, "-select_streams v -show_entries stream=pix_fmt").rfind("yuv420p10le", 0), 0u);
  // A stage that takes 8 bits only says that it rounds the 10-bit frames.
  const CmdResult r8 = run_cmd(kBin + " run -y -n 1 --no-progress -i " + in + " -f mmp=modes=1:min_unit=16 -o " + mp4);
  EXPECT_NE(r8.out.find("'mmp' works on 8-bit samples: the yuv420p16le frames are rounded to 8 bits"),
            std::string::npos)
      << r8.out;
  const std::string from_mkv = probe(mkv, fields);  // Matroska stores floats: 34000/50000 reads 17/25
  EXPECT_NE(from_mkv.find("17/25,1000/1"), std::string::npos) << from_mkv;
  EXPECT_NE(from_mkv.find("1000"), std::string::npos) << from_mkv;
  EXPECT_EQ(
      probe(mkv, "-select_streams v -show_entries stream=color_transfer,color_primaries").rfind("smpte2084,bt2020", 0),
      0u);
  // From the container this time (the H.264 stream has none of its own).
  ASSERT_EQ(run_cmd(kBin + " run -q -y -i " + mkv + " -o " + mp4).rc, 0);
  const std::string from_mp4 = probe(mp4, fields);
  EXPECT_NE(from_mp4.find("34000/50000,10000000/10000"), std::string::npos) << from_mp4;
  EXPECT_NE(from_mp4.find("1000\n"), std::string::npos) << from_mp4;
  const CmdResult r = run_cmd(kBin + " run -y -i " + in + " -o " + y4m);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("the input is HDR video (PQ transfer): a Y4M file records neither"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(hevc, yuv420p10le, HDR PQ)"), std::string::npos) << r.out;
  // The window (headless where a display can open) says it shows the video as SDR.
  const std::string shot = tmp_path("hdr_window.png");  // a headless window's screenshot goes here, not into the cwd
  const CmdResult shown =
      run_cmd(kBin + " run -n 2 --no-progress -i " + in + " --display headless --screenshot " + shot + " -o null");
  if (shown.rc == 0)
    EXPECT_NE(shown.out.find("the window shows it as SDR, without tone mapping"), std::string::npos) << shown.out;
  std::remove(shot.c_str());
  for (const auto& p : {in, mkv, mp4, y4m}) std::remove(p.c_str());
}

TEST(Libav, AudioColourMetadataAndFramesCarryOver) {
  REQUIRE_LIBAV();
  const std::string in = av_clip(), out = tmp_path("carry.mp4");
  const CmdResult r = run_cmd(kBin + " run --no-progress -i " + in + " -f median=radius=2 -o " + out);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("aac copied"), std::string::npos) << r.out;
  EXPECT_EQ(probe(out,
                  "-select_streams v -show_entries stream=codec_name,pix_fmt,color_range,color_space,"
                  "color_transfer,color_primaries,nb_read_frames -count_frames"),
            "h264,yuv420p,tv,bt709,bt709,bt709,100\n");
  EXPECT_EQ(probe(out, "-select_streams a -show_entries stream=codec_name:stream_tags=language"), "aac,eng\n");
  EXPECT_EQ(probe(out, "-show_entries format_tags=title"), "vfpipe-test\n");
  // The audio is the input's, packet for packet.
  EXPECT_EQ(run_cmd("ffmpeg -v error -i " + in + " -map 0:a -c copy -f data - | md5sum").out,
            run_cmd("ffmpeg -v error -i " + out + " -map 0:a -c copy -f data - | md5sum").out);
  // The rotation (display matrix) too.
  const std::string rot = tmp_path("rot.mp4"), rot_out = tmp_path("rot_out.mp4");
  ASSERT_EQ(run_cmd("ffmpeg -v error -y -i " + in + " -c copy -metadata:s:v:0 rotate=90 " + rot).rc, 0);
  ASSERT_EQ(run_cmd(kBin + " run -q -i " + rot + " -f median -o " + rot_out).rc, 0);
  EXPECT_EQ(probe(rot_out, "-select_streams v -show_entries stream_side_data=rotation"),
            probe(rot, "-select_streams v -show_entries stream_side_data=rotation"));
  EXPECT_NE(probe(rot_out, "-select_streams v -show_entries stream_side_data=rotation").find("90"), std::string::npos);
  for (const auto& p : {rot, rot_out}) std::remove(p.c_str());
  // -an leaves it out.
  ASSERT_EQ(run_cmd(kBin + " run -q -y -i " + in + " -an -o " + out).rc, 0);
  EXPECT_EQ(probe(out, "-show_entries stream=codec_type"), "video\n");
  for (const auto& p : {in, out}) std::remove(p.c_str());
}

// ffmpeg's -color_primaries, -color_trc, -colorspace and -color_range tag a video file
// (over the input's tags) without touching its samples; a name libavutil does not know is a
// usage error that lists the ones it does, before any output exists.
TEST(Libav, ColourTagsAsFfmpegSetsThem) {
  REQUIRE_LIBAV();
  const std::string in = av_clip(), out = tmp_path("tags.mkv"), bad = tmp_path("tags_bad.mkv");
  const CmdResult r = run_cmd(kBin + " run -q -y -i " + in + " -t 0.4 -an --lossless -color_primaries bt2020 " +
                              "-color_trc smpte2084 -colorspace bt2020nc -color_range pc " + out);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(probe(out, "-select_streams v -show_entries stream=color_range,color_space,color_transfer,color_primaries"),
            "pc,bt2020nc,smpte2084,bt2020\n");
  EXPECT_EQ(run_cmd("ffmpeg -v error -i " + out + " -f rawvideo -pix_fmt yuv420p - | md5sum").out,
            run_cmd("ffmpeg -v error -i " + in + " -t 0.4 -f rawvideo -pix_fmt yuv420p - | md5sum").out);
  ASSERT_EQ(run_cmd(kBin + " run -q -y -i " + in + " -t 0.4 -an -color_range limited " + out).rc, 0);
  EXPECT_EQ(probe(out, "-select_streams v -show_entries stream=color_range"), "tv\n");
  const CmdResult b = run_cmd(kBin + " run -q -i " + in + " -colorspace bt710 " + bad);
  EXPECT_EQ(b.rc, 2) << b.out;
  EXPECT_NE(b.out.find("-colorspace bt710: not a tag (gbr, bt709,"), std::string::npos) << b.out;
  EXPECT_FALSE(std::filesystem::exists(bad));
  for (const auto& p : {in, out}) std::remove(p.c_str());
}

// Audio re-encoded, as ffmpeg does it: where the container cannot hold the input's codec
// (AAC in WebM: Opus), or every audio stream with -c:a. The samples are the input's (a lossless
// encoder gives back ffmpeg's own decoding of the input), in step with the video, cut by -ss/-t
// as the video is; -c:a copy keeps the old rule (left out, with a warning); bad names are
// usage errors before any output exists.
TEST(Libav, AudioIsReencodedWhereAskedOrNeeded) {
  REQUIRE_LIBAV();
  const std::string in = av_clip(), webm = tmp_path("reenc.webm"), mkv = tmp_path("reenc.mkv");
  auto audio = [&](const std::string& f) {
    return probe(f, "-select_streams a -show_entries stream=codec_name,sample_rate,channels:stream_tags=language");
  };
  auto duration = [&](const std::string& f, const char* type) {
    const std::string d = run_cmd("ffprobe -v error -select_streams " + std::string(type) +
                                  " -show_entries packet=pts_time,duration_time -of csv=p=0 " + f +
                                  " | awk -F, 'NF>1{e=$1+$2} END{print e}'")
                              .out;
    return d.empty() ? -1.0 : std::stod(d);
  };
  CmdResult r = run_cmd(kBin + " run --no-progress -y -i " + in + " -n 50 -f median -o " + webm);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("audio stream #1 (aac) cannot go into the webm output as it is: re-encoded as opus"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("audio aac re-encoded as opus (48000 Hz mono, 64 kb/s)"), std::string::npos) << r.out;
  EXPECT_EQ(audio(webm), "opus,48000,1,eng\n");
  // 50 frames are 2 s: the audio is cut where the video ends, as a copy would be.
  EXPECT_NEAR(duration(webm, "a"), 2.0, 0.08);
  EXPECT_NEAR(duration(webm, "v"), 2.0, 0.05);

  // A lossless encoder: the samples are ffmpeg's decoding of the input's AAC, as 16-bit.
  r = run_cmd(kBin + " run --no-progress -y -i " + in + " -c:a flac -o " + mkv);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(audio(mkv), "flac,44100,1,eng\n");
  const std::string pcm_in = tmp_path("reenc_in.pcm"), pcm_out = tmp_path("reenc_out.pcm");
  ASSERT_EQ(run_cmd("ffmpeg -v error -y -i " + in + " -map 0:a -f s16le " + pcm_in).rc, 0);
  ASSERT_EQ(run_cmd("ffmpeg -v error -y -i " + mkv + " -map 0:a -f s16le " + pcm_out).rc, 0);
  EXPECT_GT(std::filesystem::file_size(pcm_in), 4u * 44100 * 2 - 4096);
  EXPECT_EQ(run_cmd("cmp " + pcm_in + " " + pcm_out).rc, 0) << "the re-encoded samples differ from the input's";

  // -ss and -t cut the re-encoded audio with the video; -b:a sets its rate.
  r = run_cmd(kBin + " run --no-progress -y -i " + in + " -ss 1 -t 2 -c:a libopus -b:a 48k -o " + mkv);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("re-encoded as opus (48000 Hz mono, 48 kb/s)"), std::string::npos) << r.out;
  EXPECT_NEAR(duration(mkv, "a"), 2.0, 0.08);

  // -ar and -ac re-encode audio the container could hold as it is, in its own codec.
  const std::string mp4 = tmp_path("reenc.mp4");
  r = run_cmd(kBin + " run --no-progress -y -i " + in + " -n 25 -ar 48000 -ac 2 -o " + mp4);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("audio aac re-encoded as aac (48000 Hz stereo, 128 kb/s)"), std::string::npos) << r.out;
  EXPECT_EQ(audio(mp4), "aac,48000,2,eng\n");
  EXPECT_NEAR(duration(mp4, "a"), 1.0, 0.08);
  std::remove(mp4.c_str());

  // -c:a copy: the old rule, a warning and no audio.
  r = run_cmd(kBin + " run --no-progress -y -i " + in + " -n 10 -c:a copy -o " + webm);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("audio stream #1 (aac) cannot go into the webm output: left out"), std::string::npos) << r.out;
  EXPECT_EQ(probe(webm, "-show_entries stream=codec_type"), "video\n");
  // -an wins over -c:a.
  r = run_cmd(kBin + " run --no-progress -y -i " + in + " -n 10 -an -c:a libopus -o " + mkv);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(probe(mkv, "-show_entries stream=codec_type"), "video\n");

  // Mistakes, before anything is written.
  const std::string none = tmp_path("reenc_none.mkv");
  std::remove(none.c_str());
  for (const auto& [args, msg] : std::vector<std::pair<std::string, std::string>>{
           {"-c:a nosuch -o " + none, "-c:a nosuch: no such audio encoder"},
           {"-c:a libx264 -o " + none, "-c:a libx264: no such audio encoder"},
           {"-c:a aac -o " + tmp_path("reenc_none.webm"), "-c:a aac: a webm file cannot hold aac audio"},
           {"-b:a 12q -o " + none, "-b:a: expected a bit rate"},
           {"-ar 44100 -c:a libopus -o " + none, "-ar 44100: the libopus encoder takes 48000, 24000"},
           {"-ac 2 -c:a copy -o " + none, "copied audio (-c:a copy) keeps its rate and channels"}}) {
    r = run_cmd(kBin + " run --no-progress -y -i " + in + " " + args);
    EXPECT_EQ(r.rc, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(msg), std::string::npos) << r.out;
    EXPECT_FALSE(std::filesystem::exists(none)) << args;
  }
  for (const auto& p : {in, webm, mkv, pcm_in, pcm_out}) std::remove(p.c_str());
}

// Outputs that hold video only (Y4M, PNG, .mmp) say which of the input's streams they leave
// out, one line each (-an: the audio silently); -map's explicit choice is refused instead.
TEST(Libav, VideoOnlyOutputsNameTheStreamsTheyLeaveOut) {
  REQUIRE_LIBAV();
  const std::string in = av_clip(), y4m = tmp_path("left_out.y4m"), mmp = tmp_path("left_out.mmp");
  CmdResult r = run_cmd(kBin + " run --no-progress -y -i " + in + " -n 2 -o " + y4m);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("audio stream #1 (aac) left out: a Y4M file holds video only"), std::string::npos) << r.out;
  r = run_cmd("(" + kBin + " run --no-progress -y -i " + in + " -n 2 -o - | wc -c)");
  EXPECT_NE(r.out.find("left out: Y4M on stdout holds video only"), std::string::npos) << r.out;
  r = run_cmd(kBin + " run --no-progress -y -an -i " + in + " -n 2 -o " + y4m);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out.find("left out"), std::string::npos) << r.out;
  r = run_cmd(kBin + " run --no-progress -y -i " + in + " -n 2 -o null");
  EXPECT_EQ(r.out.find("left out"), std::string::npos) << r.out;
  r = run_cmd(kBin + " run --no-progress -y -i " + in + " -map 0:v -map 0:a -n 2 -o " + y4m);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("-map: audio stream #1 (aac) left out"), std::string::npos) << r.out;
  r = run_cmd(kBin + " mmp encode -y " + in + " -o " + mmp + " --frames 1 --lambda 200 --tile 160x128");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("audio stream #1 (aac) left out: an .mmp file holds video only"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("-an to drop audio"), std::string::npos) << r.out;  // mmp encode has no -an
  for (const auto& p : {in, y4m, mmp}) std::remove(p.c_str());
}

// A photo in, a photo out, as ffmpeg does `-i photo.jpg out.jpg`: a still image input is one
// frame (a one-image output takes it without -n 1), and JPEG, TIFF and BMP outputs are one
// image each (OpenCV), which a longer input must be cut for.
TEST(Libav, StillImagesInAndOut) {
  REQUIRE_LIBAV();
  if (!VFPIPE_HAVE_OPENCV) GTEST_SKIP() << "JPEG, TIFF and BMP outputs are written by OpenCV";
  const std::string png = make("still.png", "-f lavfi -i testsrc2=size=96x64 -frames:v 1");
  const std::string jpg = make("still.jpg", "-f lavfi -i testsrc2=size=96x64 -frames:v 1");
  for (const auto& [in, out] : {std::pair{png, tmp_path("still_out.png")}, std::pair{jpg, tmp_path("still_out.jpg")},
                                std::pair{png, tmp_path("still_out.tif")}, std::pair{jpg, tmp_path("still_out.bmp")}}) {
    std::remove(out.c_str());
    const CmdResult r = run_cmd(kBin + " run -i " + in + " -f median -o " + out);
    ASSERT_EQ(r.rc, 0) << out << ": " << r.out;
    EXPECT_NE(r.out.find("1 frame in"), std::string::npos) << r.out;
    EXPECT_EQ(probe(out, "-show_entries stream=width,height"), "96,64\n") << out;
    std::remove(out.c_str());
  }
  // A clip into one image: refused up front unless cut to one frame.
  const std::string clip = av_clip(), one = tmp_path("still_clip.jpg");
  CmdResult r = run_cmd(kBin + " run -i " + clip + " -o " + one);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("holds 1 image"), std::string::npos) << r.out;
  r = run_cmd(kBin + " run -i " + clip + " -frames:v 1 -o " + one);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(std::filesystem::exists(one));
  r = run_cmd(kBin + " run -y -i " + png + " --lossless -o " + one);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("would be lossy"), std::string::npos) << r.out;
  for (const auto& p : {png, jpg, clip, one}) std::remove(p.c_str());
}

// The stream's colour tags become the frames' colour description, which picks the RGB
// conversion (BT.709 here, where an untagged frame of this size would get BT.601), and a
// Y4M output keeps the range.
TEST(Libav, ColourTagsChooseTheConversion) {
  REQUIRE_LIBAV();
  struct Case {
    const char* tags;
    ColorDesc want;
  } cases[] = {{"-colorspace bt709 -color_range tv", {ColorMatrix::BT709, ColorRange::Limited}},
               {"-colorspace bt470bg -color_range pc", {ColorMatrix::BT601, ColorRange::Full}},
               {"-colorspace bt2020nc -color_range tv", {ColorMatrix::BT2020, ColorRange::Limited}},
               {"", {ColorMatrix::Unspecified, ColorRange::Limited}}};  // ffmpeg tags the range anyway
  for (const Case& c : cases) {
    const std::string in = make("colour.mkv",
                                "-f lavfi -i testsrc2=size=64x48:rate=25:duration=0.2 -c:v ffv1 "
                                "-pix_fmt yuv444p " +
                                    std::string(c.tags));
    auto src = open_source(in, SourceOptions{});
    EXPECT_EQ(src->spec().color, c.want) << c.tags;
    HostFrame f(src->spec(), false);
    ASSERT_TRUE(src->read(f));
    // The format stage converts with the tags: the same as convert_cpu given them.
    FrameSpec rgb = src->spec();
    rgb.format = PixelFormat::RGB24;
    HostFrame want(rgb, false), untagged(rgb, false);
    convert_cpu(f.view(), want.view(), c.want);
    convert_cpu(f.view(), untagged.view(), ColorDesc{});
    const std::string y4m = tmp_path("colour.y4m");
    ASSERT_EQ(run_cmd(kBin + " run -q -y -i " + in + " -n 1 -o " + y4m).rc, 0);
    std::ifstream h(y4m);
    std::string header;
    std::getline(h, header);
    EXPECT_EQ(header.find("XCOLORRANGE=FULL") != std::string::npos, c.want.range == ColorRange::Full) << header;
    if (c.want.matrix == ColorMatrix::BT709) EXPECT_FALSE(want.same_pixels(untagged));
    std::remove(in.c_str());
  }
}

// -r: a constant output rate, frames duplicated or dropped by their timestamps; the audio
// is copied as it was; a Y4M output gets the rate too.
TEST(Libav, OutputRateDuplicatesAndDropsFrames) {
  REQUIRE_LIBAV();
  const std::string in = av_clip(), up = tmp_path("rate50.mkv"), down = tmp_path("rate10.mp4");
  CmdResult r = run_cmd(kBin + " run -y -i " + in + " -r 50 --lossless -o " + up);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("-r 50/1: 200 frames written, 100 duplicated, 0 dropped"), std::string::npos) << r.out;
  EXPECT_EQ(probe(up, "-select_streams v -show_entries stream=r_frame_rate"), "50/1\n");
  // Every input frame twice in a row: frames 2k and 2k+1 are the same picture.
  const std::string md5s = run_cmd("ffmpeg -v error -i " + up + " -map 0:v -f framemd5 - | grep -v '^#'").out;
  std::vector<std::string> sums;
  for (size_t a = 0, b; (b = md5s.find('\n', a)) != std::string::npos; a = b + 1)
    sums.push_back(md5s.substr(md5s.rfind(',', b) + 1, b - md5s.rfind(',', b) - 1));
  ASSERT_EQ(sums.size(), 200u);
  for (size_t k = 0; k + 2 < sums.size(); k += 2) {
    EXPECT_EQ(sums[k], sums[k + 1]) << k;
    EXPECT_NE(sums[k + 1], sums[k + 2]) << k;
  }
  r = run_cmd(kBin + " run -y -i " + in + " -r 10 -o " + down);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("dropped"), std::string::npos) << r.out;
  EXPECT_EQ(probe(down, "-select_streams v -show_entries stream=r_frame_rate"), "10/1\n");
  const int frames = std::stoi(probe(down, "-select_streams v -count_frames -show_entries stream=nb_read_frames"));
  EXPECT_GE(frames, 40);
  EXPECT_LE(frames, 41);
  EXPECT_EQ(run_cmd("ffmpeg -v error -i " + in + " -map 0:a -c copy -f data - | md5sum").out,
            run_cmd("ffmpeg -v error -i " + down + " -map 0:a -c copy -f data - | md5sum").out);
  // A Y4M output of the VFR-capable input: 4 s at 30 frames/s (tests/test_io.cpp checks the frames).
  const std::string y4m = tmp_path("rate.y4m");
  r = run_cmd(kBin + " run -y -i " + in + " -r 30 -o " + y4m);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(probe(y4m, "-count_frames -show_entries stream=nb_read_frames,r_frame_rate"), "30/1,120\n");
  std::remove(y4m.c_str());
  r = run_cmd(kBin + " run -y -i " + in + " -r 0 -o " + down);
  EXPECT_EQ(r.rc, 2) << r.out;
  for (const auto& p : {in, up, down}) std::remove(p.c_str());
}

TEST(Libav, VariableFrameRateTimestampsAreKept) {
  REQUIRE_LIBAV();
  // 25 fps for 2 s, then every other frame (12.5 fps).
  const std::string in = make("vfr.mp4",
                              "-f lavfi -i testsrc2=size=160x120:rate=25:duration=4 -vf "
                              "select='lt(t\\,2)+gte(t\\,2)*not(mod(n\\,2))' -fps_mode vfr -c:v libx264");
  const std::string out = tmp_path("vfr_out.mkv");
  ASSERT_EQ(run_cmd(kBin + " run -q -i " + in + " -f median -o " + out).rc, 0);
  const std::string want = probe(in, "-select_streams v -show_entries frame=pts_time");
  EXPECT_EQ(probe(out, "-select_streams v -show_entries frame=pts_time"), want);
  EXPECT_NE(want.find("2.080000"), std::string::npos) << "the fixture is not variable-rate";
  for (const auto& p : {in, out}) std::remove(p.c_str());
}

TEST(Libav, TenBitStaysTenBitAndExact) {
  REQUIRE_LIBAV();
  const std::string in =
      make("ten.mkv", "-f lavfi -i testsrc2=size=160x120:rate=25:duration=1 -pix_fmt yuv420p10le -c:v ffv1");
  const std::string lossless = tmp_path("ten_out.mkv"), h264 = tmp_path("ten_out.mp4");
  const CmdResult r = run_cmd(kBin + " run --no-progress -i " + in + " -o " + lossless + " --lossless");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("yuv420p16le"), std::string::npos) << "carried at 16 bits: " << r.out;
  EXPECT_EQ(probe(lossless, "-show_entries stream=pix_fmt"), "yuv420p10le\n");
  EXPECT_EQ(md5_of_raw(lossless, "yuv420p10le"), md5_of_raw(in, "yuv420p10le"));
  ASSERT_EQ(run_cmd(kBin + " run -q -i " + in + " -o " + h264).rc, 0);
  EXPECT_EQ(probe(h264, "-show_entries stream=codec_name,pix_fmt"), "h264,yuv420p10le\n");
  // ffmpeg's -pix_fmt yuv420p10le makes an 8-bit input's output 10-bit; a depth the encoder
  // lacks is said (libx264 has no 12-bit), and another encoder has it (VP9's profile 2/3).
  const std::string eight = av_clip(), webm = tmp_path("twelve.webm");
  ASSERT_EQ(run_cmd(kBin + " run -q -y -i " + eight + " -t 0.2 -pix_fmt yuv420p10le -o " + h264).rc, 0);
  EXPECT_EQ(probe(h264, "-select_streams v -show_entries stream=pix_fmt"), "yuv420p10le\n");
  const CmdResult twelve =
      run_cmd(kBin + " run -y --no-progress -i " + eight + " -t 0.2 -pix_fmt yuv444p12le -o " + h264);
  ASSERT_EQ(twelve.rc, 0) << twelve.out;
  EXPECT_NE(twelve.out.find("the libx264 encoder has no 12-bit yuv444p format; writing yuv444p10le"), std::string::npos)
      << twelve.out;
  if (run_cmd("ffmpeg -hide_banner -h encoder=libvpx-vp9").out.find("yuv420p12le") != std::string::npos) {
    ASSERT_EQ(run_cmd(kBin + " run -q -y -i " + eight + " -t 0.2 -an -pix_fmt yuv420p12le -o " + webm).rc, 0);
    EXPECT_EQ(probe(webm, "-select_streams v -show_entries stream=pix_fmt"), "yuv420p12le\n");
  }
  for (const auto& p : {in, lossless, h264, eight, webm}) std::remove(p.c_str());
}

TEST(Libav, SeekDurationAndOverwriteAsInFfmpeg) {
  REQUIRE_LIBAV();
  const std::string in = av_clip(), out = tmp_path("cut.mp4");
  ASSERT_EQ(run_cmd(kBin + " run -q -i " + in + " -ss 1 -t 2 -o " + out).rc, 0);
  EXPECT_EQ(probe(out, "-select_streams v -count_frames -show_entries stream=nb_read_frames"), "50\n");
  const std::string pts = probe(out, "-select_streams v -show_entries frame=pts_time");
  EXPECT_EQ(pts.substr(0, pts.find_first_of(",\n")), "0.000000");
  const double audio = std::stod(probe(out, "-select_streams a -show_entries stream=duration"));
  EXPECT_NEAR(audio, 2.0, 0.05);
  // -to: an end time; -v quiet: nothing on the terminal.
  const CmdResult to = run_cmd(kBin + " run -v quiet -y -i " + in + " -ss 1 -to 2.5 -o " + out);
  EXPECT_EQ(to.rc, 0);
  EXPECT_EQ(to.out, "");
  EXPECT_EQ(probe(out, "-select_streams v -count_frames -show_entries stream=nb_read_frames"), "38\n");
  // An existing output: refused (2), replaced with -y, kept with -n (1).
  const std::string before = run_cmd("md5sum < " + out).out;
  CmdResult r = run_cmd(kBin + " run -q -i " + in + " -o " + out);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("add -y"), std::string::npos) << r.out;
  EXPECT_EQ(run_cmd(kBin + " run -q -i " + in + " -n -o " + out).rc, 1);
  EXPECT_EQ(run_cmd("md5sum < " + out).out, before);
  EXPECT_EQ(run_cmd(kBin + " run -q -i " + in + " -n 5 -y -o " + out).rc, 0);  // -n N: frames
  EXPECT_EQ(probe(out, "-select_streams v -count_frames -show_entries stream=nb_read_frames"), "5\n");
  // An empty window (past the 4 s clip's end, -t 0, -to before -ss) would write a file
  // without a frame: a usage error before the output is touched.
  const std::pair<const char*, const char*> empty[] = {{"-ss 4.5", "-ss 4.5: '"},
                                                       {"-t 0", "-t 0: an empty time window"},
                                                       {"-ss 2 -to 1.5", "-to 1.5: not after the start (-ss 2)"}};
  for (const auto& [args, says] : empty) {
    r = run_cmd(kBin + " run -q -y -i " + in + " " + args + " -o " + out);
    EXPECT_EQ(r.rc, 2) << args << ": " << r.out;
    EXPECT_NE(r.out.find(says), std::string::npos) << args << ": " << r.out;
    EXPECT_EQ(probe(out, "-select_streams v -count_frames -show_entries stream=nb_read_frames"), "5\n") << args;
  }
  r = run_cmd(kBin + " run -q -y -i " + in + " -ss 4.5 -o " + out);
  EXPECT_NE(r.out.find("lasts 4.0"), std::string::npos) << r.out;
  for (const auto& p : {in, out}) std::remove(p.c_str());
}

TEST(Libav, EncoderOptions) {
  REQUIRE_LIBAV();
  const std::string in = av_clip(), out = tmp_path("enc.mp4");
  ASSERT_EQ(
      run_cmd(kBin + " run -q -i " + in + " -c:v libx264 -crf 30 -preset ultrafast -x264-params keyint=10 -o " + out)
          .rc,
      0);
  // keyint=10: a keyframe every 10 frames.
  const std::string keys = probe(out, "-select_streams v -skip_frame nokey -show_entries frame=pts_time");
  EXPECT_GE(std::count(keys.begin(), keys.end(), '\n'), 10) << keys;
  ASSERT_EQ(run_cmd(kBin + " run -q -y -i " + in + " -c:v mpeg4 -b:v 300k -g 25 -o " + out).rc, 0);
  EXPECT_EQ(probe(out, "-select_streams v -show_entries stream=codec_name"), "mpeg4\n");
  // ffmpeg's options of the encoder (CLI11 alone read -tune as -t une) and -metadata.
  CmdResult r = run_cmd(kBin + " run -q -y -i " + in +
                        " -tune film -profile:v main -level 3.1 -maxrate 1M -bufsize 2M -bf 0 -metadata title=Filtered "
                        "-o " +
                        out);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(probe(out, "-select_streams v -show_entries stream=profile,level,has_b_frames"), "Main,0,31\n");
  EXPECT_EQ(probe(out, "-show_entries format_tags=title"), "Filtered\n");
  const std::pair<const char*, const char*> bad[] = {
      {"-c:v nosuchcodec", "no such video encoder"},
      {"-c:v ffv1 -crf 20", "has no crf"},
      {"-preset nosuchpreset", "cannot open the libx264 encoder"},
      {"-b:v fast", "bit rate"},
      {"-c:v ffv1 -tune film", "the ffv1 encoder has no option tune"},
      {"-metadata title", "expected KEY=VALUE"},
  };
  const std::string mkv = tmp_path("enc.mkv");
  for (auto [args, want] : bad) {
    const CmdResult r = run_cmd(kBin + " run -q -y -i " + in + " " + args + " -o " + mkv);
    EXPECT_EQ(r.rc, 2) << args << ": " << r.out;
    EXPECT_NE(r.out.find(want), std::string::npos) << args << ": " << r.out;
  }
  for (const auto& p : {in, out}) std::remove(p.c_str());
}

// A batch list's per-item keys set the encoder's options and the tags over the command
// line's, key by key; the other items keep the command line's.
TEST(Libav, BatchItemsTakeEncoderOptionsAndMetadata) {
  REQUIRE_LIBAV();
  const std::string a = make("bi_a.mkv", "-f lavfi -i testsrc2=size=160x120:rate=25:duration=1 -c:v ffv1");
  const std::string b = make("bi_b.mkv", "-f lavfi -i testsrc2=size=160x120:rate=25:duration=1 -c:v ffv1");
  const std::string list = tmp_path("bi.jsonl"), outdir = tmp_path("bi_out");
  std::filesystem::remove_all(outdir);
  {
    std::ofstream(list) << "{\"input\": \"" << a
                        << "\", \"profile:v\": \"main\", \"encoder_opt:bf\": 0, \"metadata:title\": \"Item A\", "
                           "\"metadata:comment\": \"per item\"}\n"
                        << "{\"input\": \"" << b << "\"}\n";
  }
  const CmdResult r = run_cmd(kBin + " batch --list " + list + " -o '" + outdir +
                              "/{stem}.mp4' --device cpu --progress none -c:v libx264 -profile:v high -bf 2 "
                              "-metadata title=Command -metadata artist=vfpipe");
  ASSERT_EQ(r.rc, 0) << r.out;
  namespace fs = std::filesystem;
  const std::string oa = outdir + "/" + fs::path(a).stem().string() + ".mp4",
                    ob = outdir + "/" + fs::path(b).stem().string() + ".mp4";
  EXPECT_EQ(probe(oa, "-select_streams v -show_entries stream=profile,has_b_frames"), "Main,0\n");
  EXPECT_EQ(probe(ob, "-select_streams v -show_entries stream=profile,has_b_frames"), "High,2\n");
  EXPECT_EQ(probe(oa, "-show_entries format_tags=title,artist,comment"), "Item A,vfpipe,per item\n");
  EXPECT_EQ(probe(ob, "-show_entries format_tags=title,artist"), "Command,vfpipe\n");
  // A key prefix without a name is a usage error naming the line.
  { std::ofstream(list) << "{\"input\": \"" << a << "\", \"metadata:\": \"x\"}\n"; }
  const CmdResult bad = run_cmd(kBin + " batch --list " + list + " -o '" + outdir + "/{stem}.mkv' --device cpu");
  EXPECT_EQ(bad.rc, 2) << bad.out;
  EXPECT_NE(bad.out.find("bi.jsonl:1: 'metadata:' names no key (e.g. metadata:title)"), std::string::npos) << bad.out;
  std::filesystem::remove_all(outdir);
  for (const auto& p : {a, b, list}) std::remove(p.c_str());
}

TEST(Libav, TruncatedInputKeepsItsFramesAndFails) {
  REQUIRE_LIBAV();
  // The index in front (faststart), the second half of the data gone.
  const std::string whole = make("whole.mp4",
                                 "-f lavfi -i testsrc2=size=160x120:rate=25:duration=4 -c:v libx264 "
                                 "-movflags +faststart");
  const std::string cut = tmp_path("cut_half.mp4"), out = tmp_path("cut_out.y4m");
  std::ifstream f(whole, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::ofstream(cut, std::ios::binary) << data.substr(0, data.size() / 2);
  CmdResult r = run_cmd(kBin + " run -q -i " + cut + " -o " + out);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("is damaged"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("frames decoded are written"), std::string::npos) << r.out;
  const std::string frames = run_cmd("grep -a -c FRAME " + out).out;
  EXPECT_GT(std::stoi(frames), 20) << "the frames before the damage are written";
  r = run_cmd(kBin + " run -q -y -i " + cut + " -o " + out + " --ignore-input-errors");
  EXPECT_EQ(r.rc, 0) << r.out;
  // Damage in the middle of a stream without an index: the frames after it are kept too,
  // and the loss is counted.
  const std::string ts = make("mid.ts", "-f lavfi -i testsrc2=size=320x240:rate=25:duration=4 -c:v libx264 -f mpegts");
  {
    std::fstream t(ts, std::ios::in | std::ios::out | std::ios::binary);
    t.seekg(0, std::ios::end);
    const auto n = static_cast<std::streamoff>(t.tellg());
    t.seekp(n / 2);
    for (int i = 0; i < 20000; ++i) t.put(static_cast<char>(i * 7));
  }
  r = run_cmd(kBin + " run -q -y -i " + ts + " -o " + out);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("frames lost"), std::string::npos) << r.out;
  const int kept = std::stoi(run_cmd("grep -a -c FRAME " + out).out);
  EXPECT_GT(kept, 55) << "frames after the damage are kept";
  EXPECT_LT(kept, 100);
  std::remove(ts.c_str());
  for (const auto& p : {whole, cut, out}) std::remove(p.c_str());
}

// Ctrl-C mid-encode: the container is finished (the MP4 index written), and the file holds
// every frame the summary reports.
TEST(Libav, InterruptedEncodeLeavesAPlayableFile) {
  REQUIRE_LIBAV();
  const std::string out = tmp_path("sigint.mp4"), log = tmp_path("sigint.log");
  const CmdResult r =
      run_cmd("bash -c '" + kBin + " run --no-progress -i synthetic=size=320x240:rate=25:frames=0 -f median -o " + out +
              " > " + log + " 2>&1 & pid=$!; sleep 2; kill -INT $pid; wait $pid; echo rc=$?'");
  EXPECT_NE(r.out.find("rc=130"), std::string::npos) << r.out;
  const std::string said = run_cmd("cat " + log).out;
  const size_t at = said.find("after ");
  ASSERT_NE(at, std::string::npos) << said;
  const long frames = std::stol(said.substr(at + 6));
  EXPECT_GT(frames, 0);
  EXPECT_EQ(probe(out, "-select_streams v -count_frames -show_entries stream=nb_read_frames"),
            std::to_string(frames) + "\n");
  // A place that cannot be written is one clear error.
  const CmdResult ro = run_cmd(kBin + " run -q -i synthetic=frames=2 -o /proc/vfpipe-test.mp4");
  EXPECT_EQ(ro.rc, 1) << ro.out;
  EXPECT_NE(ro.out.find("cannot open output"), std::string::npos) << ro.out;
  for (const auto& p : {out, log}) std::remove(p.c_str());
}

// -hwaccel: on a machine without a usable GPU, "cuda" is one clear error (exit 1) and
// "auto" on the CPU backend quietly decodes on the CPU. (On a GPU machine the NVDEC tests
// of the GPU suite cover both paths.)
TEST(Libav, HwaccelWithoutAGpuIsAClearError) {
  if (!VFPIPE_HAVE_LIBAV) GTEST_SKIP() << "built without FFmpeg's libraries";
  const std::string info = run_cmd(kBin + " info").out;
  if (info.find("GPU: none usable") == std::string::npos && info.find("CUDA backend: not built") == std::string::npos)
    GTEST_SKIP() << "a GPU is usable here: the GPU suite tests NVDEC";
  const std::string in = std::string(VFPIPE_SOURCE_DIR) + "/tests/data/h264_322x242_yuv420p.mp4";
  CmdResult r = run_cmd(kBin + " run -i " + in + " -hwaccel cuda -o null");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("-hwaccel cuda: "), std::string::npos) << r.out;
  r = run_cmd(kBin + " run --device cpu -i " + in + " -o null");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out.find("NVDEC"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("30 frames"), std::string::npos) << r.out;
}

// NVDEC frames kept in GPU memory need the CUDA backend: asked for on the CPU backend, a
// usage error before anything is read.
TEST(Libav, GpuFramesOnTheCpuBackendAreAUsageError) {
  if (!VFPIPE_HAVE_LIBAV) GTEST_SKIP() << "built without FFmpeg's libraries";
  const std::string in = std::string(VFPIPE_SOURCE_DIR) + "/tests/data/h264_322x242_yuv420p.mp4";
  CmdResult r = run_cmd(kBin + " run --device cpu -hwaccel_output_format cuda -i " + in + " -o null");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("-hwaccel_output_format cuda: frames in GPU memory need the CUDA backend"), std::string::npos)
      << r.out;
  r = run_cmd(kBin + " run --device cpu -hwaccel_output_format host -i " + in + " -o null");
  EXPECT_EQ(r.rc, 0) << r.out;
}

// -map's parser points at the offending character; the resolver follows ffmpeg's rules
// (maps in order, negative maps remove, '?' optional) and wants exactly one video stream.
TEST(StreamMap, ParsesAndResolvesAsFfmpeg) {
  const StreamMap m = parse_stream_map("-0:a:1?");
  EXPECT_TRUE(m.negative);
  EXPECT_TRUE(m.optional);
  EXPECT_EQ(m.type, 'a');
  EXPECT_EQ(m.index, 1);
  EXPECT_EQ(parse_stream_map("0:3").index, 3);
  EXPECT_EQ(parse_stream_map("0").type, 0);
  for (const auto& [text, pos] : std::vector<std::pair<std::string, size_t>>{
           {"", 0}, {"1:v", 0}, {"0:x", 2}, {"0v", 1}, {"0:v:", 4}, {"0:v:1x", 5}, {"0:a:1??", 5}, {"-", 1}}) {
    try {
      parse_stream_map(text);
      ADD_FAILURE() << "accepted '" << text << "'";
    } catch (const ParseError& e) {
      EXPECT_EQ(e.pos(), pos) << text << ": " << e.pretty();
    }
  }
  // video, audio, cover picture, audio, subtitle
  const std::vector<StreamKind> in = {{'v', false}, {'a', false}, {'v', true}, {'a', false}, {'s', false}};
  auto resolve = [&](std::vector<std::string> maps) {
    std::vector<StreamMap> ms;
    for (const auto& t : maps) ms.push_back(parse_stream_map(t));
    return resolve_stream_maps(ms, in);
  };
  MappedStreams r = resolve({"0"});
  EXPECT_EQ(r.video, 0);
  EXPECT_EQ(r.copied, (std::vector<int>{1, 2, 3, 4}));
  r = resolve({"0:s", "0:V", "0:a:1"});  // map order is the copied streams' order
  EXPECT_EQ(r.copied, (std::vector<int>{4, 3}));
  r = resolve({"0", "-0:a:0", "-0:v:1"});
  EXPECT_EQ(r.copied, (std::vector<int>{3, 4}));
  r = resolve({"0:v:0", "0:d?"});
  EXPECT_TRUE(r.copied.empty());
  EXPECT_THROW(resolve({"0:v:0", "0:d"}), Error);  // nothing matches, not optional
  EXPECT_THROW(resolve({"0:a"}), Error);           // no video to filter
  r = resolve({"0:v"});                            // a cover picture is copied, not filtered
  EXPECT_EQ(r.video, 0);
  EXPECT_EQ(r.copied, std::vector<int>{2});
  const std::vector<StreamKind> two = {{'v', false}, {'v', false}};
  EXPECT_THROW(resolve_stream_maps({parse_stream_map("0")}, two), Error);  // two video streams to filter
  EXPECT_EQ(resolve_stream_maps({parse_stream_map("0:v:1")}, two).video, 1);
  EXPECT_EQ(resolve({"0:V", "0:2"}).copied, std::vector<int>{2});  // the cover picture is copied
}

// -map on a real file: the chosen audio stream, bit-exact, in the order of the maps; usage
// errors exit 2 before any output exists.
TEST(Libav, MapChoosesTheStreams) {
  REQUIRE_LIBAV();
  const std::string in = make("map_in.mkv",
                              "-f lavfi -i testsrc2=size=160x120:rate=25:duration=2 -f lavfi -i "
                              "sine=frequency=440:duration=2 -f lavfi -i sine=frequency=880:duration=2 -map 0 -map 1 "
                              "-map 2 -c:v libx264 -c:a aac -metadata:s:a:1 language=fre");
  const std::string out = tmp_path("map_out.mkv");
  auto audio_md5 = [](const std::string& f, int n) {
    return run_cmd("ffmpeg -v error -i " + f + " -map 0:a:" + std::to_string(n) + " -c copy -f data - | md5sum").out;
  };
  ASSERT_EQ(run_cmd(kBin + " run -q -i " + in + " -map 0:v -map 0:a:1 -f median -o " + out).rc, 0);
  EXPECT_EQ(probe(out, "-show_entries stream=codec_type:stream_tags=language"), "video\naudio,fre\n");
  EXPECT_EQ(audio_md5(out, 0), audio_md5(in, 1));
  ASSERT_EQ(run_cmd(kBin + " run -q -y -i " + in + " -map 0 -map -0:a:0 -o " + out).rc, 0);
  EXPECT_EQ(probe(out, "-show_entries stream=codec_type:stream_tags=language"), "video\naudio,fre\n");
  std::remove(out.c_str());
  for (const char* bad : {"-map 0:a", "-map 0:s", "-map 0:q", "-map 1"}) {
    const CmdResult r = run_cmd(kBin + " run -q -i " + in + " " + bad + " -o " + out);
    EXPECT_EQ(r.rc, 2) << bad << ": " << r.out;
    EXPECT_NE(r.out.find("-map"), std::string::npos) << r.out;
    EXPECT_FALSE(std::filesystem::exists(out)) << bad;
  }
  // A mapped stream the container cannot hold is an error, not a silent loss.
  const std::string srt = tmp_path("map.srt"), with_subs = tmp_path("map_subs.mkv");
  { std::ofstream(srt) << "1\n00:00:00,000 --> 00:00:01,000\nhello\n"; }
  ASSERT_EQ(run_cmd("ffmpeg -v error -y -i " + in + " -i " + srt + " -map 0 -map 1 -c copy -c:s ass " + with_subs).rc,
            0);
  const CmdResult r = run_cmd(kBin + " run -q -i " + with_subs + " -map 0 -o " + tmp_path("map_subs.avi"));
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("cannot go into"), std::string::npos) << r.out;
  ASSERT_EQ(run_cmd(kBin + " run -q -i " + with_subs + " -map 0 -o " + out).rc, 0);
  EXPECT_EQ(probe(out, "-show_entries stream=codec_type"), "video\naudio\naudio\nsubtitle\n");
  // -c:a re-encodes the audio streams only: the subtitles are still copied.
  ASSERT_EQ(run_cmd(kBin + " run -q -y -i " + with_subs + " -map 0 -c:a libopus -o " + out).rc, 0);
  EXPECT_EQ(probe(out, "-show_entries stream=codec_type,codec_name"),
            "h264,video\nopus,audio\nopus,audio\nass,subtitle\n");
  for (const auto& p : {in, out, srt, with_subs}) std::remove(p.c_str());
}

// -sn and -dn leave subtitles and data streams out, as -an does audio; an output that holds
// video only names the option that drops each stream it leaves out.
TEST(Libav, SubtitlesAndDataLeftOutOnRequest) {
  REQUIRE_LIBAV();
  const std::string in = make("sn_in.mkv",
                              "-f lavfi -i testsrc2=size=160x120:rate=25:duration=1 -f lavfi -i sine=duration=1 "
                              "-c:v libx264 -c:a aac");
  const std::string srt = tmp_path("sn.srt"), subs = tmp_path("sn_subs.mkv"), out = tmp_path("sn_out.mkv");
  { std::ofstream(srt) << "1\n00:00:00,000 --> 00:00:01,000\nhello\n"; }
  ASSERT_EQ(run_cmd("ffmpeg -v error -y -i " + in + " -i " + srt + " -map 0 -map 1 -c copy " + subs).rc, 0);
  ASSERT_EQ(run_cmd(kBin + " run -q -i " + subs + " -o " + out).rc, 0);
  EXPECT_EQ(probe(out, "-show_entries stream=codec_type"), "video\naudio\nsubtitle\n");
  ASSERT_EQ(run_cmd(kBin + " run -q -y -i " + subs + " -sn -o " + out).rc, 0);
  EXPECT_EQ(probe(out, "-show_entries stream=codec_type"), "video\naudio\n");
  CmdResult r = run_cmd(kBin + " run -y -i " + subs + " -o " + tmp_path("sn_out.y4m"));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("subtitle stream #2 (subrip) left out"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("-sn to drop subtitles"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("-an to drop audio"), std::string::npos) << r.out;
  r = run_cmd(kBin + " run -y -i " + subs + " -sn -an -o " + tmp_path("sn_out.y4m"));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out.find("left out"), std::string::npos) << r.out;
  // A QuickTime timecode track is a data stream.
  const std::string tc = make("dn_in.mov",
                              "-f lavfi -i testsrc2=size=160x120:rate=25:duration=1 -c:v libx264 "
                              "-timecode 01:00:00:00");
  r = run_cmd(kBin + " run -y -i " + tc + " -o " + tmp_path("sn_out.y4m"));
  EXPECT_NE(r.out.find("-dn to drop data streams"), std::string::npos) << r.out;
  r = run_cmd(kBin + " run -y -i " + tc + " -dn -o " + tmp_path("sn_out.y4m"));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out.find("left out"), std::string::npos) << r.out;
  for (const auto& p : {in, srt, subs, out, tc, tmp_path("sn_out.y4m")}) std::remove(p.c_str());
}

// Text subtitles that a container cannot hold as they are are converted to a text format
// it holds (SubRip: mov_text in MP4, WebVTT in WebM), with their text and timing; MP4s with
// subtitles are written classic (fragmented ones lose the cues' durations).
TEST(Libav, TextSubtitlesConvertedForTheContainer) {
  REQUIRE_LIBAV();
  const std::string in = make("subconv_in.mkv",
                              "-f lavfi -i testsrc2=size=160x120:rate=25:duration=3 -f lavfi -i sine=duration=3 "
                              "-c:v libx264 -c:a aac");
  const std::string srt = tmp_path("subconv.srt"), subs = tmp_path("subconv_subs.mkv");
  const std::string cues = "1\n00:00:00,500 --> 00:00:01,250\nhello\n\n2\n00:00:02,000 --> 00:00:02,800\nworld\n";
  { std::ofstream(srt) << cues; }
  ASSERT_EQ(run_cmd("ffmpeg -v error -y -i " + in + " -i " + srt + " -map 0 -map 1 -c copy " + subs).rc, 0);
  auto cues_of = [](const std::string& f) { return run_cmd("ffmpeg -v error -i " + f + " -map 0:s -f srt -").out; };
  const std::string want = cues_of(subs);
  ASSERT_NE(want.find("00:00:02,000 --> 00:00:02,800"), std::string::npos) << want;
  // The same text, and times within 30 ms: a WebM output starts all its streams at the
  // Opus audio's priming (about -7 ms, as ffmpeg's own WebM does), which moves the cues
  // as it moves the video.
  auto same_cues = [](const std::string& got, const std::string& want) {
    auto split = [](const std::string& text, std::vector<int>* ms) {
      std::string words;
      std::istringstream in(text);
      for (std::string line; std::getline(in, line);) {
        int h1, m1, s1, f1, h2, m2, s2, f2;
        if (std::sscanf(line.c_str(), "%d:%d:%d,%d --> %d:%d:%d,%d", &h1, &m1, &s1, &f1, &h2, &m2, &s2, &f2) == 8) {
          ms->push_back(((h1 * 60 + m1) * 60 + s1) * 1000 + f1);
          ms->push_back(((h2 * 60 + m2) * 60 + s2) * 1000 + f2);
        } else {
          words += line + "\n";
        }
      }
      return words;
    };
    std::vector<int> a, b;
    if (split(got, &a) != split(want, &b) || a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (std::abs(a[i] - b[i]) > 30 || (i % 2 == 1 && a[i] - a[i - 1] != b[i] - b[i - 1])) return false;
    return true;
  };
  const struct {
    const char* ext;
    const char* codec;
  } outs[] = {{".mp4", "mov_text"}, {".webm", "webvtt"}, {".mov", "mov_text"}};
  for (const auto& o : outs) {
    const std::string out = tmp_path(std::string("subconv_out") + o.ext);
    const CmdResult r = run_cmd(kBin + " run -y -i " + subs + " -f median -o " + out);
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_NE(r.out.find(std::string("subtitle subrip converted to ") + o.codec), std::string::npos) << r.out;
    EXPECT_EQ(probe(out, "-select_streams s -show_entries stream=codec_name"), std::string(o.codec) + "\n");
    EXPECT_TRUE(same_cues(cues_of(out), want)) << o.ext << ": " << cues_of(out);
    // Copied from the converted file: still the same cues.
    const std::string again = tmp_path(std::string("subconv_again") + o.ext);
    ASSERT_EQ(run_cmd(kBin + " run -q -y -i " + out + " -o " + again).rc, 0);
    EXPECT_TRUE(same_cues(cues_of(again), want)) << o.ext << ": " << cues_of(again);
    std::remove(out.c_str());
    std::remove(again.c_str());
  }
  // AVI holds no subtitles: left out, said so.
  CmdResult r = run_cmd(kBin + " run -y -i " + subs + " -c:v mpeg4 -o " + tmp_path("subconv.avi"));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("subtitle stream #2 (subrip) cannot go into the avi output: left out"), std::string::npos)
      << r.out;
  // -c:s names the format: SubRip into ASS in Matroska (which holds SubRip as it is), the
  // same cues; -c:s copy never converts.
  const std::string ass = tmp_path("subconv_ass.mkv"), copied = tmp_path("subconv_copy.mp4");
  r = run_cmd(kBin + " run -y -i " + subs + " -c:s ass -o " + ass);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("subtitle subrip converted to ass"), std::string::npos) << r.out;
  EXPECT_EQ(probe(ass, "-select_streams s -show_entries stream=codec_name"), "ass\n");
  EXPECT_TRUE(same_cues(cues_of(ass), want)) << cues_of(ass);
  r = run_cmd(kBin + " run -y -i " + subs + " -c:s copy -o " + copied);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("cannot go into the mp4 output as it is: left out (-c:s copy"), std::string::npos) << r.out;
  EXPECT_EQ(probe(copied, "-show_entries stream=codec_type"), "video\naudio\n");
  // An encoder that is no subtitle encoder, or one the container cannot hold: usage errors
  // before anything is written.
  const struct {
    const char *args, *ext, *says;
  } bad[] = {
      {"-c:s h264", ".mkv", "-c:s h264: no such subtitle encoder"},
      {"-c:s webvtt", ".mp4", "-c:s webvtt: the mp4 output cannot hold webvtt subtitles (it holds mov_text)"},
      {"-scodec srt", ".avi", "-c:s srt: the avi output cannot hold srt subtitles (it holds no text subtitles"},
  };
  for (const auto& b : bad) {
    const std::string out = tmp_path(std::string("subconv_bad") + b.ext);
    r = run_cmd(kBin + " run -y -i " + subs + " " + b.args + " -o " + out);
    EXPECT_EQ(r.rc, 2) << b.args << ": " << r.out;
    EXPECT_NE(r.out.find(b.says), std::string::npos) << b.args << ": " << r.out;
    EXPECT_FALSE(std::filesystem::exists(out)) << b.args;
  }
  for (const auto& p : {in, srt, subs, tmp_path("subconv.avi"), ass, copied}) std::remove(p.c_str());
}

// The copied streams come from the source's own demuxer: a pipe and an HTTP stream keep
// their audio, bit-exact, like a file.
TEST(Libav, PipeAndNetworkInputsKeepTheirAudio) {
  REQUIRE_LIBAV();
  const std::string in = av_clip(), out = tmp_path("pipe_out.mkv");
  auto audio_md5 = [](const std::string& f) {
    return run_cmd("ffmpeg -v error -i " + f + " -map 0:a -c copy -f data - | md5sum").out;
  };
  // mp4 through a pipe cannot seek: a Matroska copy of the clip instead.
  const std::string mkv = tmp_path("pipe_in.mkv");
  ASSERT_EQ(run_cmd("ffmpeg -v error -y -i " + in + " -c copy " + mkv).rc, 0);
  CmdResult r = run_cmd("cat " + mkv + " | " + kBin + " run -q -i pipe:0 -f median -o " + out);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(probe(out, "-show_entries stream=codec_type"), "video\naudio\n");
  EXPECT_EQ(audio_md5(out), audio_md5(in));
  // An .mp4 with its index at the end cannot be read from a pipe: one clear error, no crash.
  r = run_cmd("cat " + in + " | " + kBin + " run -q -y -i pipe:0 -o " + out);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("+faststart"), std::string::npos) << r.out;
  // An HTTP server on a free port, serving the clip's folder.
  const std::string dir = in.substr(0, in.rfind('/')), port_file = tmp_path("http.port");
  const std::string script = tmp_path("http_server.py");
  {
    std::ofstream py(script);
    py << "import functools, http.server\n"
          "h = functools.partial(http.server.SimpleHTTPRequestHandler, directory='"
       << dir
       << "')\n"
          "s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), h)\n"
          "with open('"
       << port_file << ".tmp', 'w') as f: f.write(str(s.server_address[1]))\n"
       << "import os; os.rename('" << port_file << ".tmp', '" << port_file << "')\n"
       << "s.serve_forever()\n";
  }
  r = run_cmd("bash -c '(python3 " + script + " >/dev/null 2>&1 & echo $! > " + port_file +
              ".pid); for i in $(seq 100); do [ -s " + port_file + " ] && break; sleep 0.1; done; port=$(cat " +
              port_file + "); " + kBin + " run -q -y -i http://127.0.0.1:$port/" + mkv.substr(mkv.rfind('/') + 1) +
              " -o " + out + "; rc=$?; kill $(cat " + port_file + ".pid); exit $rc'");
  if (r.out.find("No module named") != std::string::npos) GTEST_SKIP() << "python3's http.server is missing";
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(probe(out, "-show_entries stream=codec_type"), "video\naudio\n");
  EXPECT_EQ(audio_md5(out), audio_md5(in));
  for (const auto& p : {in, out, mkv, port_file, port_file + ".pid", script}) std::remove(p.c_str());
}

// A disk that fills up midway: one clear error (status 1), and the file holds the frames
// before the last second, playable: MP4 is written fragmented, Matroska in 1 s clusters.
// -movflags +faststart gives a classic MP4 (index in front) instead.
TEST(Libav, FullDiskLeavesAPlayableFile) {
  REQUIRE_LIBAV();
  for (const char* ext : {"mp4", "mkv"}) {
    const std::string out = tmp_path(std::string("full_disk.") + ext);
    std::remove(out.c_str());
    // 2 MB for 20 s of noisy 320x240 video (about 28 KB a frame): the limit falls after a
    // few fragments.
    const CmdResult r = run_cmd("ulimit -f 2000; " + kBin +
                                " run -q --device cpu -i synthetic=size=320x240:rate=25:frames=500:noise=gauss "
                                "-preset ultrafast -crf 30 -o " +
                                out);
    EXPECT_EQ(r.rc, 1) << ext << ": " << r.out;
    EXPECT_NE(r.out.find("File too large (the frames written before the last second stay playable)"), std::string::npos)
        << r.out;
    const std::string n = run_cmd(
                              "ffprobe -v quiet -select_streams v -count_frames -show_entries "
                              "stream=nb_read_frames -of csv=p=0 " +
                              out + " 2>/dev/null")
                              .out;
    EXPECT_GE(std::atoi(n.c_str()), 50) << ext << ": " << n;  // at least the first two seconds
    std::remove(out.c_str());
  }
  const std::string classic = tmp_path("classic.mp4");
  ASSERT_EQ(run_cmd(kBin + " run -q -y -i synthetic=size=64x48:frames=30 -movflags +faststart -o " + classic).rc, 0);
  EXPECT_EQ(probe(classic, "-select_streams v -show_entries stream=nb_frames"), "30\n");  // an index in front
  const CmdResult bad =
      run_cmd(kBin + " run -q -y -i synthetic=size=64x48:frames=3 -movflags +faststart -o " + tmp_path("classic.mkv"));
  EXPECT_EQ(bad.rc, 2) << bad.out;
  EXPECT_NE(bad.out.find("-movflags applies to .mp4"), std::string::npos) << bad.out;
  std::remove(classic.c_str());
}
