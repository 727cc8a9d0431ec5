#include "pipeline/io/open.hpp"

#include <algorithm>
#include <filesystem>

#include "pipeline/error.hpp"
#include "pipeline/io/synthetic.hpp"
#include "pipeline/io/y4m.hpp"
#if VFPIPE_HAVE_OPENCV
#include "pipeline/io/opencv_io.hpp"
#endif

namespace vfp {

namespace {
bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
std::string lower_ext(const std::string& path) {
  std::string e = std::filesystem::path(path).extension().string();
  std::transform(e.begin(), e.end(), e.begin(), ::tolower);
  return e;
}
bool is_pattern(const std::string& s) { return s.find_first_of("%*?[") != std::string::npos; }

#if !VFPIPE_HAVE_OPENCV
[[noreturn]] void no_opencv(const std::string& what) {
  throw Error(ErrorKind::Input, what +
                                    " needs OpenCV, and this build has none (rebuild with "
                                    "-DVFPIPE_WITH_OPENCV=ON). Without it vfpipe reads and "
                                    "writes Y4M ('-' for pipes) and the synthetic source.");
}
#endif
}  // namespace

bool have_opencv() {
#if VFPIPE_HAVE_OPENCV
  return true;
#else
  return false;
#endif
}

std::unique_ptr<Source> open_source(const std::string& spec, const SourceOptions& opt) {
  if (spec.empty()) throw Error(ErrorKind::Usage, "no input given (-i)");
  if (spec == "-") return std::make_unique<Y4mSource>("-");
  if (starts_with(spec, "synthetic") && (spec.size() == 9 || spec[9] == '=')) {
    SyntheticParams p = parse_synthetic(spec);
    p.pinned = opt.pinned;
    return std::make_unique<SyntheticSource>(p);
  }
  std::string cam;
  if (starts_with(spec, "camera=")) cam = spec.substr(7);
  else if (starts_with(spec, "webcam=")) cam = spec.substr(7);
  else if (spec == "camera" || spec == "webcam") cam = "0";
  else if (starts_with(spec, "/dev/video")) cam = spec;
  if (!cam.empty()) {
#if VFPIPE_HAVE_OPENCV
    return open_camera_source(cam, opt.width, opt.height, opt.fps);
#else
    no_opencv("camera input");
#endif
  }
  if (lower_ext(spec) == ".y4m") return std::make_unique<Y4mSource>(spec);
  if (is_pattern(spec)) {
#if VFPIPE_HAVE_OPENCV
    return open_image_sequence_source(spec, opt.fps);
#else
    no_opencv("image-sequence input");
#endif
  }
#if VFPIPE_HAVE_OPENCV
  return open_video_source(spec);
#else
  std::error_code ec;
  if (spec.find("://") == std::string::npos && !std::filesystem::exists(spec, ec))
    throw Error(ErrorKind::Input, "input '" + spec + "' not found");
  no_opencv("video input '" + spec + "'");
#endif
}

std::unique_ptr<Sink> open_sink(const std::string& spec, const SinkOptions& opt) {
  if (spec.empty() || spec == "null" || spec == "none") return std::make_unique<NullSink>();
  if (spec == "-") return std::make_unique<Y4mSink>("-");
  std::string ext = lower_ext(spec);
  if (ext == ".y4m") return std::make_unique<Y4mSink>(spec);
#if VFPIPE_HAVE_OPENCV
  if (spec.find('%') != std::string::npos) return open_image_sequence_sink(spec);
  std::string codec = opt.codec;
  if (codec.empty()) {
    if (ext == ".mp4" || ext == ".mov" || ext == ".m4v") codec = "mp4v";
    else if (ext == ".avi") codec = "MJPG";
    else if (ext == ".mkv") codec = "FFV1";
    else
      throw Error(ErrorKind::Usage, "unknown output type '" + spec +
                                        "' (use .y4m, .mp4, .mov, .avi, .mkv, an image pattern "
                                        "such as frames/%06d.png, '-' for Y4M on stdout, or null)");
  }
  return open_video_sink(spec, codec);
#else
  (void)opt;
  throw Error(ErrorKind::Output, "output '" + spec +
                                     "' needs OpenCV, and this build has none; use .y4m, '-' "
                                     "(Y4M on stdout) or null");
#endif
}

}  // namespace vfp
