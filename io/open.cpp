#include "io/open.hpp"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>

#include "core/error.hpp"
#include "core/log.hpp"
#include "io/lossless.hpp"
#include "io/rate.hpp"
#include "io/synthetic.hpp"
#include "io/y4m.hpp"
#if VFPIPE_HAVE_OPENCV
#include "io/opencv_io.hpp"
#endif
#if VFPIPE_HAVE_LIBAV
#include "io/libav.hpp"
#endif

namespace vfp {

bool valid_int_pattern(const std::string& p) {
  int convs = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] != '%') continue;
    if (i + 1 < p.size() && p[i + 1] == '%') {
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < p.size() && (std::isdigit(static_cast<unsigned char>(p[j])))) ++j;
    if (j >= p.size() || p[j] != 'd') return false;
    ++convs;
    i = j;
  }
  return convs == 1;
}

std::string sequence_file_name(const std::string& pattern, int64_t index) {
  char buf[4096];
  std::snprintf(buf, sizeof buf, pattern.c_str(), static_cast<int>(index + 1));
  return buf;
}

namespace {
bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
std::string lower_ext(const std::string& path) {
  std::string e = std::filesystem::path(path).extension().string();
  std::transform(e.begin(), e.end(), e.begin(), ::tolower);
  return e;
}
bool is_pattern(const std::string& s) { return s.find_first_of("%*?[") != std::string::npos; }
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), ::tolower);
  return s;
}

#if !VFPIPE_HAVE_OPENCV
[[noreturn]] void no_opencv(const std::string& what) {
  throw Error(ErrorKind::Input, what +
                                    " needs OpenCV, and this build has none (rebuild with "
                                    "-DVFPIPE_WITH_OPENCV=ON). Without it vfpipe reads and "
                                    "writes Y4M ('-' for pipes) and the synthetic source.");
}
#endif
// -ss / -t / -to for the sources that have no timestamps to seek by (Y4M files and pipes,
// image sequences, the synthetic source, cameras): frame k is at k / fps seconds, and the
// frames kept are those at or after `start` and before start + duration, as FFmpeg keeps
// them. Frames before the window are read and dropped (a pipe cannot seek).
class TimeWindowSource final : public Source {
 public:
  TimeWindowSource(std::unique_ptr<Source> in, double start, double duration) : in_(std::move(in)) {
    const double fps = in_->spec().fps.value();
    if (!(fps > 0)) throw Error(ErrorKind::Usage, "-ss / -t: the input has no frame rate to count time by");
    const auto frame_at = [&](double t) { return static_cast<int64_t>(std::ceil(t * fps - 1e-6)); };
    first_ = frame_at(start);
    end_ = duration >= 0 ? frame_at(start + duration) : INT64_MAX;
    if (const int64_t n = in_->frame_count(); n >= 0 && first_ >= n)
      throw Error(ErrorKind::Usage,
                  log::format("-ss %g: the input has %lld frames (%.2f s at %.6g fps), so nothing is left to filter",
                              start, static_cast<long long>(n), static_cast<double>(n) / fps, fps));
  }
  FrameSpec spec() const override { return in_->spec(); }
  std::string describe() const override { return in_->describe(); }
  int64_t frame_count() const override {
    const int64_t n = in_->frame_count();
    return n < 0 ? -1 : std::max<int64_t>(0, std::min(n, end_) - first_);
  }
  bool is_live() const override { return in_->is_live(); }
  int sample_bits() const override { return in_->sample_bits(); }
  bool read(HostFrame& dst) override {
    while (at_ < end_ && in_->read(dst))
      if (at_++ >= first_) return true;
    return false;
  }
  bool provides_frames() const override { return in_->provides_frames(); }
  FramePtr next_frame() override {
    while (at_ < end_)
      if (FramePtr f = in_->next_frame(); !f || at_++ >= first_) return f;
    return nullptr;
  }
  bool can_fill_device() const override { return in_->can_fill_device(); }

 private:
  std::unique_ptr<Source> in_;
  int64_t first_ = 0, end_ = INT64_MAX, at_ = 0;
};

}  // namespace

bool have_opencv() {
#if VFPIPE_HAVE_OPENCV
  return true;
#else
  return false;
#endif
}

namespace {
std::unique_ptr<Source> open_untimed(const std::string& spec, const SourceOptions& opt);
}

std::unique_ptr<Source> open_source(const std::string& spec, const SourceOptions& opt) {
  std::unique_ptr<Source> s = open_untimed(spec, opt);
  // Video files seek by their own timestamps (libav); every other source counts frames.
  if ((opt.start > 0 || opt.duration >= 0) && !s->handles_time_window()) {
    if (opt.start > 0 && s->is_live()) throw Error(ErrorKind::Usage, "-ss: a live input cannot start later");
    s = std::make_unique<TimeWindowSource>(std::move(s), opt.start, opt.duration);
  }
  return s;
}

namespace {
// --size and --fps ask a camera for a mode (--fps also times an image sequence); given
// for an input that keeps its own size and rate, they would be dropped without a word.
void check_capture_options(const std::string& spec, const SourceOptions& opt, bool camera, bool sequence) {
  if (opt.width > 0 && !camera)
    throw Error(ErrorKind::Usage, "--size asks a camera for a capture size; '" + spec +
                                      "' is not a camera (vfpipe does not scale frames; the synthetic source "
                                      "takes size=WxH)");
  if (opt.fps > 0 && !camera && !sequence)
    throw Error(ErrorKind::Usage, "--fps sets an image sequence's rate or asks a camera for one; '" + spec +
                                      "' has its own rate (-r N sets the output's rate; the synthetic source "
                                      "takes rate=N)");
}

std::unique_ptr<Source> open_untimed(const std::string& spec, const SourceOptions& opt) {
  if (spec.empty()) throw Error(ErrorKind::Usage, "no input given (-i)");
  const auto y4m = [&](const std::string& path) {
    auto s = std::make_unique<Y4mSource>(path);
    s->set_ignore_errors(opt.ignore_input_errors);
    return s;
  };
  std::string cam;
  if (starts_with(spec, "camera=") || starts_with(spec, "webcam="))
    cam = spec.substr(7);
  else if (spec == "camera" || spec == "webcam")
    cam = "0";
  else if (starts_with(spec, "/dev/video"))
    cam = spec;
  check_capture_options(spec, opt, !cam.empty(), is_pattern(spec));
  if (spec == "-") return y4m("-");
  if (starts_with(spec, "synthetic") && (spec.size() == 9 || spec[9] == '=')) {
    SyntheticParams p = parse_synthetic(spec);
    p.pinned = opt.pinned;
    return std::make_unique<SyntheticSource>(p);
  }
  if (!cam.empty()) {
#if VFPIPE_HAVE_OPENCV
    return open_camera_source(cam, opt.width, opt.height, opt.fps);
#else
    no_opencv("camera input");
#endif
  }
  if (lower_ext(spec) == ".y4m") return y4m(spec);
  if (spec.size() > 7 && lower(spec.substr(spec.size() - 7)) == ".y4m.gz") return y4m(spec);
  if (is_pattern(spec)) {
#if VFPIPE_HAVE_OPENCV
    return open_image_sequence_source(spec, opt.fps);
#else
    no_opencv("image-sequence input");
#endif
  }
#if VFPIPE_HAVE_LIBAV
  // URLs (http://, rtmp://, ...) and libav's pipe:N / fd: protocols are not paths.
  if (spec.find("://") == std::string::npos && !starts_with(spec, "pipe:") && !starts_with(spec, "fd:")) {
    std::error_code ec;
    if (!std::filesystem::exists(spec, ec)) throw Error(ErrorKind::Input, "input '" + spec + "' not found");
    if (std::filesystem::is_directory(spec, ec))
      throw Error(ErrorKind::Input, "input '" + spec + "' is a directory (images in it: '" + spec + "/*.png')");
  }
  LibavInputOptions lo;
  lo.start = opt.start;
  lo.duration = opt.duration;
  lo.ignore_errors = opt.ignore_input_errors;
  lo.hwaccel = opt.hwaccel == "auto" ? (opt.pinned ? "auto" : "none") : opt.hwaccel;  // auto: the CUDA backend's
  if (opt.hwaccel_output == "cuda" && !opt.pinned)
    throw Error(ErrorKind::Usage, "-hwaccel_output_format cuda: frames in GPU memory need the CUDA backend");
  lo.gpu_frames = opt.pinned && opt.hwaccel_output != "host";
  lo.runtime_context = opt.pinned;
  lo.threads = opt.codec_threads;
  lo.map = opt.map;
  return open_libav_source(spec, lo);
#elif VFPIPE_HAVE_OPENCV
  if (!opt.map.empty()) throw Error(ErrorKind::Usage, "-map needs a build with FFmpeg's libraries");
  if (opt.start > 0 || opt.duration >= 0)
    throw Error(ErrorKind::Usage, "-ss / -t need a build with FFmpeg's libraries");
  return open_video_source(spec);
#else
  std::error_code ec;
  if (spec.find("://") == std::string::npos && !std::filesystem::exists(spec, ec))
    throw Error(ErrorKind::Input, "input '" + spec + "' not found");
  no_opencv("video input '" + spec + "'");
#endif
}
}  // namespace

// FFmpeg's rule: an existing output is only replaced when asked (-y); -n keeps it.
void check_overwrite(const std::string& path, Overwrite o) {
  std::error_code ec;
  if (o == Overwrite::Yes || !std::filesystem::exists(path, ec)) return;
  if (o == Overwrite::No) throw Error(ErrorKind::Output, "output '" + path + "' exists; not overwritten (-n)");
  throw Error(ErrorKind::Usage, "output '" + path + "' exists: add -y to overwrite it (-n: never overwrite)");
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (std::filesystem::equivalent(a, b, ec) && !ec) return true;
  // Names of files that need not exist yet (an output, an image pattern): the same path
  // once '.', '..' and links are resolved.
  const auto ca = std::filesystem::weakly_canonical(a, ec);
  if (ec) return false;
  const auto cb = std::filesystem::weakly_canonical(b, ec);
  return !ec && ca == cb;
}

void check_output_is_not_input(const std::string& input, const std::string& output) {
  if (input.empty() || input == "-" || output.empty() || output == "-" || output == "null" || output == "none") return;
  if (same_file(input, output))
    throw Error(ErrorKind::Usage, "output '" + output + "' is the input '" + input +
                                      "': writing it would destroy the frames before they are read; write "
                                      "another file");
}

namespace {
// Still-image outputs other than PNG (vfpipe's own encoder), written by OpenCV; `lossless`
// set where the format keeps every sample (for --lossless).
bool is_still_image(const std::string& ext, bool* lossless = nullptr) {
  static const std::pair<const char*, bool> exts[] = {{".jpg", false}, {".jpeg", false}, {".bmp", true},
                                                      {".tif", true},  {".tiff", true},  {".ppm", true},
                                                      {".pgm", true},  {".pnm", true},   {".webp", false}};
  for (const auto& [e, keeps] : exts)
    if (ext == e) {
      if (lossless) *lossless = keeps;
      return true;
    }
  return false;
}

// Outputs the libav sink writes: files that are none of vfpipe's own formats.
bool is_video_file(const std::string& spec) {
  if (spec.empty() || spec == "null" || spec == "none" || spec == "-" || spec.find('%') != std::string::npos)
    return false;
  const std::string ext = lower_ext(spec);
  return ext != ".y4m" && ext != ".gz" && ext != ".png" && !is_still_image(ext);
}

// A Y4M output's depth for 16-bit frames: -pix_fmt's, else the input's (C420p10 in, C420p10
// out, as ffmpeg keeps a stream's format), else 16.
int y4m_bits(const SinkOptions& opt) {
  return opt.video.bits > 0 ? opt.video.bits : opt.video.input_bits > 0 ? opt.video.input_bits : 16;
}

// The sink for an output's type, before -r.
std::unique_ptr<Sink> open_sink_of_type(const std::string& spec, const SinkOptions& opt) {
  if (spec.empty() || spec == "null" || spec == "none") return std::make_unique<NullSink>();
  if (spec == "-") {
    // Frames on a terminal are noise that can leave it unusable: said, not written (ffmpeg's
    // benchmark habit -f null - lands here, as -f is vfpipe's chain).
    if (isatty(STDOUT_FILENO))
      throw Error(ErrorKind::Usage,
                  "-o -: Y4M on stdout, which is a terminal here; pipe it (... -o - | ffplay -) or name a file "
                  "(ffmpeg's -f null - is -o null here)");
    return std::make_unique<Y4mSink>("-", y4m_bits(opt));
  }
  const bool pattern = spec.find('%') != std::string::npos;
  // Every single-file output, before it is created (an image sequence's files are its own).
  if (!pattern) check_overwrite(spec, opt.overwrite);
  std::string ext = lower_ext(spec);
  LosslessOptions lo;
  lo.level = opt.compression_level;
  lo.gpu = opt.gpu;
  lo.reference = opt.deflate_reference;
  if (ext == ".y4m") return std::make_unique<Y4mSink>(spec, y4m_bits(opt));
  if (ext == ".gz") {
    if (spec.size() < 7 || lower(spec.substr(spec.size() - 7)) != ".y4m.gz")
      throw Error(ErrorKind::Usage, "output '" + spec + "': compressed streams are .y4m.gz");
    return std::make_unique<Y4mGzSink>(spec, lo);
  }
  // One image, as ffmpeg writes `-frames:v 1 out.png`: vfpipe's PNG encoder.
  if (!pattern && ext == ".png") return std::make_unique<PngSequenceSink>(spec, lo);
  if (pattern && (opt.lossless || !VFPIPE_HAVE_OPENCV)) {
    if (ext != ".png")
      throw Error(ErrorKind::Usage,
                  "output '" + spec + "': vfpipe's lossless image sequences are PNG (frames/%06d.png)");
    if (!valid_int_pattern(spec))
      throw Error(ErrorKind::Usage, "bad image pattern '" + spec + "' (use one %d or %0Nd, e.g. frames/%06d.png)");
    return std::make_unique<PngSequenceSink>(spec, lo);
  }
  // One still image of another kind, as ffmpeg writes `-frames:v 1 out.jpg`: OpenCV.
  if (bool keeps = false; !pattern && is_still_image(ext, &keeps)) {
    if (opt.lossless && !keeps)
      throw Error(ErrorKind::Usage, "--lossless: '" + spec + "' would be lossy; use .png, .tif or .bmp");
#if VFPIPE_HAVE_OPENCV
    return open_image_sink(spec);
#else
    throw Error(ErrorKind::Output, "output '" + spec + "' needs OpenCV, and this build has none; write a .png");
#endif
  }
  if (opt.lossless && !(ext == ".mkv" && (opt.codec.empty() || opt.codec == "FFV1" || opt.codec == "ffv1")))
    throw Error(ErrorKind::Usage,
                "--lossless: '" + spec + "' would be lossy; use frames/%06d.png, .y4m, .y4m.gz or .mkv (FFV1)");
#if VFPIPE_HAVE_LIBAV
  if (!pattern) {
    LibavOutputOptions lo2;
    // The fourcc spellings of OpenCV builds still work.
    static const std::pair<const char*, const char*> fourcc[] = {
        {"mp4v", "mpeg4"}, {"MJPG", "mjpeg"}, {"FFV1", "ffv1"}, {"avc1", "libx264"}, {"H264", "libx264"}};
    static_cast<VideoOptions&>(lo2) = opt.video;
    lo2.codec = opt.codec;
    for (const auto& [cc, name] : fourcc)
      if (opt.codec == cc) lo2.codec = name;
    lo2.lossless = opt.lossless;
    return open_libav_sink(spec, lo2);
  }
#endif
#if VFPIPE_HAVE_OPENCV
  if (pattern) return open_image_sequence_sink(spec);
  std::string codec = opt.codec;
  if (codec.empty()) {
    if (ext == ".mp4" || ext == ".mov" || ext == ".m4v")
      codec = "mp4v";
    else if (ext == ".avi")
      codec = "MJPG";
    else if (ext == ".mkv")
      codec = "FFV1";
    else
      throw Error(ErrorKind::Usage, "unknown output type '" + spec +
                                        "' (use .y4m, .mp4, .mov, .avi, .mkv, an image pattern "
                                        "such as frames/%06d.png, '-' for Y4M on stdout, or null)");
  }
  return open_video_sink(spec, codec);
#else
  (void)opt;
  throw Error(ErrorKind::Output, "output '" + spec +
                                     "' needs OpenCV, and this build has none; use .y4m, .y4m.gz, "
                                     "frames/%06d.png, '-' (Y4M on stdout) or null");
#endif
}
}  // namespace

void report_streams_left_out(const Source& src, const std::string& spec, const VideoOptions& keep) {
#if VFPIPE_HAVE_LIBAV
  const std::string ext = lower_ext(spec);
  if (spec.empty() || spec == "null" || spec == "none" || (ext != ".mmp" && is_video_file(spec))) return;
  const std::shared_ptr<LibavInput> in = libav_input_of(src);
  if (!in) return;
  bool mapped = false;
  const std::vector<OtherStream> streams = libav_other_streams(*in, keep, &mapped);
  const std::string hdr = libav_hdr_transfer(*in);
  if (streams.empty() && hdr.empty()) return;
  const std::string what = spec == "-"                            ? "Y4M on stdout"
                           : ext == ".mmp"                        ? "an .mmp file"
                           : spec.find('%') != std::string::npos  ? "an image sequence"
                           : ext == ".png" || is_still_image(ext) ? "an image"
                           : ext == ".gz"                         ? "a .y4m.gz file"
                                                                  : "a Y4M file";
  // The samples stay as they are, but nothing says how to show them: a player takes them
  // for SDR video.
  if (!hdr.empty())
    log::warn(
        "the input is HDR video (%s transfer): %s records neither the transfer nor the HDR metadata, so "
        "players show it as SDR%s",
        hdr.c_str(), what.c_str(), ext == ".mmp" ? "" : " (write .mkv or .mp4 to keep them)");
  for (const OtherStream& s : streams) {
    const std::string line = s.name + " left out: " + what + " holds video only";
    if (mapped) throw Error(ErrorKind::Usage, "-map: " + line + " (write .mkv, or map it out)");
    // `mmp encode` has neither -an nor another container to offer.
    if (ext == ".mmp")
      log::warn("%s", line.c_str());
    else
      log::warn("%s (write .mkv or .mp4 to keep it, or %s)", line.c_str(), s.drop.c_str());
  }
#else
  (void)src, (void)spec, (void)keep;
#endif
}

std::vector<std::string> describe_input(Source& src) {
  const FrameSpec s = src.spec();
  HostFrame first(s, false);
  const bool any = src.read(first);
  std::vector<std::string> out;
  out.push_back("input:   " + src.describe());
  std::string frames = s.describe();
  if (const int64_t n = src.frame_count(); n >= 0)
    frames += log::format(", %lld frame%s", static_cast<long long>(n), n == 1 ? "" : "s") +
              (s.fps.value() > 0 ? log::format(" (%.2f s)", static_cast<double>(n) / s.fps.value()) : "");
  else if (!any)
    frames += ", no frames";
  out.push_back("frames:  " + frames);
  const int bits = src.sample_bits() > 0 ? src.sample_bits() : is_16bit(s.format) ? 16 : 8;
  out.push_back(log::format("samples: %d bits%s", bits, bits != 8 && bits != 16 ? " (carried at 16)" : ""));
  if (!is_packed_rgb(s.format))
    out.push_back(log::format("colour:  matrix %s, %s range", color_matrix_name(s.color.matrix),
                              color_range_name(s.color.range)));
#if VFPIPE_HAVE_LIBAV
  if (const std::shared_ptr<LibavInput> in = libav_input_of(src)) {
    const std::string transfer = libav_hdr_transfer(*in), hdr = libav_hdr_summary(*in);
    if (!transfer.empty() || !hdr.empty())
      out.push_back("HDR:     " + (transfer.empty() ? std::string() : transfer + " transfer") +
                    (!transfer.empty() && !hdr.empty() ? "; " : "") + hdr);
    if (any) out.push_back("decoder: " + libav_decoder_of(src));
    bool mapped = false;
    for (const OtherStream& o : libav_other_streams(*in, VideoOptions{}, &mapped))
      out.push_back("also:    " + o.name + " (video files carry it; " + o.drop + ")");
  }
#endif
  return out;
}

namespace {
// Options of a video file's encoder and muxer given for an output that has neither (Y4M,
// images, null): said, as ffmpeg warns of options no stream used, not dropped silently.
void warn_unused_video_options(const std::string& spec, const SinkOptions& opt) {
  if (is_video_file(spec)) return;
  const VideoOptions& v = opt.video;
  std::string unused;
  int count = 0;
  const auto add = [&](bool given, const char* name) {
    if (given) unused += std::string(count++ ? ", " : "") + name;
  };
  add(!opt.codec.empty(), "-c:v");
  add(v.crf >= 0, "-crf");
  add(!v.preset.empty(), "-preset");
  add(v.bitrate > 0, "-b:v");
  add(v.gop >= 0, "-g");
  add(v.aspect.num > 0, "-aspect");
  add(!v.color_primaries.empty(), "-color_primaries");
  add(!v.color_trc.empty(), "-color_trc");
  add(!v.colorspace.empty(), "-colorspace");
  add(!v.color_range.empty(), "-color_range");
  // Y4M writes -pix_fmt's depth itself (C420p10, as ffmpeg).
  add(v.bits > 0 && spec != "-" && lower_ext(spec) != ".y4m",
      "-pix_fmt's bit depth (its 16-bit samples are written as they are)");
  add(!v.codec_params.empty(), "the codec parameters");
  add(!v.encoder_options.empty(), "the encoder's options (-tune, -profile:v, ...)");
  add(!v.metadata.empty(), "-metadata");
  add(!v.audio_codec.empty(), "-c:a");
  add(!v.subtitle_codec.empty(), "-c:s");
  add(v.audio_bitrate > 0, "-b:a");
  add(v.audio_rate > 0, "-ar");
  add(v.audio_channels > 0, "-ac");
  if (unused.empty()) return;
  const std::string what = spec.empty() || spec == "null" || spec == "none" ? "the null output" : "'" + spec + "'";
  log::warn("%s: %s writes no encoded video and ignores %s (%s to video files such as .mp4 and .mkv)", unused.c_str(),
            what.c_str(), count > 1 ? "them" : "it", count > 1 ? "they apply" : "it applies");
}
}  // namespace

std::unique_ptr<Sink> open_sink(const std::string& spec, const SinkOptions& opt) {
  warn_unused_video_options(spec, opt);
  std::unique_ptr<Sink> sink = open_sink_of_type(spec, opt);
  // -r: video files place frames by their timestamps themselves; the other outputs are
  // given the frames of a constant rate.
  if (opt.video.rate.num <= 0 || (VFPIPE_HAVE_LIBAV && is_video_file(spec))) return sink;
  std::shared_ptr<LibavInput> in = opt.video.input;
  return make_rate_sink(std::move(sink), opt.video.rate, [in](int64_t index, Rational fps) {
#if VFPIPE_HAVE_LIBAV
    return frame_seconds(in.get(), index, fps);
#else
    return fps.num > 0 ? static_cast<double>(index) * fps.den / fps.num : 0.0;
#endif
  });
}

}  // namespace vfp
