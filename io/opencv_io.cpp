#include "io/opencv_io.hpp"
#include "io/open.hpp"

#include <glob.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <opencv2/core.hpp>
#include <opencv2/core/utils/logger.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <opencv2/videoio.hpp>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"

namespace vfp {

namespace {

void quiet_opencv() {
  static bool once = [] {
    cv::utils::logging::setLogLevel(cv::utils::logging::LOG_LEVEL_ERROR);
    // libav's own messages ("[matroska @ 0x..] EBML header parsing failed") duplicate
    // vfpipe's one-line errors: AV_LOG_QUIET, read by OpenCV's FFmpeg backend when it
    // starts, unless the user asked for its log.
    ::setenv("OPENCV_FFMPEG_LOGLEVEL", "-8", 0);
    return true;
  }();
  (void)once;
}

// Copies an 8-bit BGR/gray/BGRA Mat into a frame of `spec` (BGR24 or GRAY8), or a 16-bit
// gray Mat into a GRAY16 frame.
void mat_to_frame(const cv::Mat& m0, HostFrame& dst) {
  if (dst.spec().format == PixelFormat::GRAY16) {
    const ImageView v = dst.view();
    for (int y = 0; y < v.height; ++y) std::memcpy(v.row(0, y), m0.ptr(y), static_cast<size_t>(v.pw[0]) * 2);
    return;
  }
  cv::Mat m = m0;
  if (m.channels() == 4) cv::cvtColor(m0, m, cv::COLOR_BGRA2BGR);
  if (dst.spec().format == PixelFormat::GRAY8 && m.channels() == 3) cv::cvtColor(m, m, cv::COLOR_BGR2GRAY);
  if (dst.spec().format == PixelFormat::BGR24 && m.channels() == 1) cv::cvtColor(m, m, cv::COLOR_GRAY2BGR);
  ImageView v = dst.view();
  const size_t row_bytes = static_cast<size_t>(v.pw[0]) * (m.channels() == 3 ? 3 : 1);
  for (int y = 0; y < v.height; ++y) std::memcpy(v.row(0, y), m.ptr(y), row_bytes);
}

cv::Mat frame_to_mat(const HostFrame& f) {
  ImageView v = f.view();
  const PixelFormat fmt = f.spec().format;
  int type = fmt == PixelFormat::GRAY8 ? CV_8UC1 : fmt == PixelFormat::GRAY16 ? CV_16UC1 : CV_8UC3;
  return cv::Mat(v.height, v.width, type, v.data[0], static_cast<size_t>(v.pitch[0]));
}

class CaptureSource final : public Source {
 public:
  CaptureSource(std::unique_ptr<cv::VideoCapture> cap, std::string name, bool live)
      : cap_(std::move(cap)), name_(std::move(name)), live_(live) {
    // Decode the first frame now: an unreadable or corrupt input fails here, before any
    // output is created.
    if (!cap_->read(first_) || first_.empty())
      throw Error(ErrorKind::Input, name_ +
                                        ": no frame could be decoded (corrupt, empty or "
                                        "unsupported video)");
    if (first_.depth() != CV_8U) throw Error(ErrorKind::Input, name_ + ": unsupported sample depth (8-bit video only)");
    spec_.format = PixelFormat::BGR24;
    spec_.width = first_.cols;
    spec_.height = first_.rows;
    double fps = cap_->get(cv::CAP_PROP_FPS);
    if (fps > 0 && fps < 1000)
      spec_.fps = std::fabs(fps - 29.97) < 0.01 ? Rational{30000, 1001}
                                                : Rational{static_cast<int>(std::lround(fps * 1000)), 1000};
    if (spec_.fps.den == 1000 && spec_.fps.num % 1000 == 0) spec_.fps = {spec_.fps.num / 1000, 1};
    validate_spec(spec_, name_.c_str());
    double n = live ? -1 : cap_->get(cv::CAP_PROP_FRAME_COUNT);
    count_ = n > 0 ? static_cast<int64_t>(n) : -1;
  }
  FrameSpec spec() const override { return spec_; }
  std::string describe() const override { return name_; }
  int64_t frame_count() const override { return count_; }
  bool is_live() const override { return live_; }
  bool read(HostFrame& dst) override {
    cv::Mat m;
    if (!first_.empty()) {
      m = first_;
      first_ = cv::Mat();
    } else if (!cap_->read(m) || m.empty()) {
      if (count_ > 0 && read_ + 1 < count_)
        log::warn("%s: the stream ended after %lld of %lld frames (truncated or corrupt?)", name_.c_str(),
                  static_cast<long long>(read_), static_cast<long long>(count_));
      return false;
    }
    if (m.cols != spec_.width || m.rows != spec_.height)
      throw Error(ErrorKind::Input,
                  log::format("%s: frame %lld changed size to %dx%d (from %dx%d)", name_.c_str(),
                              static_cast<long long>(read_), m.cols, m.rows, spec_.width, spec_.height));
    mat_to_frame(m, dst);
    ++read_;
    return true;
  }

 private:
  std::unique_ptr<cv::VideoCapture> cap_;
  std::string name_;
  bool live_;
  cv::Mat first_;
  FrameSpec spec_;
  int64_t count_ = -1, read_ = 0;
};

class ImageSeqSource final : public Source {
 public:
  ImageSeqSource(std::vector<std::string> files, std::string pattern, double fps)
      : files_(std::move(files)), pattern_(std::move(pattern)) {
    cv::Mat m = load(0);
    spec_.format = m.depth() == CV_16U ? PixelFormat::GRAY16
                   : m.channels() == 1 ? PixelFormat::GRAY8
                                       : PixelFormat::BGR24;
    spec_.width = m.cols;
    spec_.height = m.rows;
    if (fps > 0) spec_.fps = {static_cast<int>(std::lround(fps * 1000)), 1000};
    if (spec_.fps.den == 1000 && spec_.fps.num % 1000 == 0) spec_.fps = {spec_.fps.num / 1000, 1};
    validate_spec(spec_, files_[0].c_str());
  }
  FrameSpec spec() const override { return spec_; }
  std::string describe() const override { return log::format("%s (%zu images)", pattern_.c_str(), files_.size()); }
  int64_t frame_count() const override { return static_cast<int64_t>(files_.size()); }
  bool read(HostFrame& dst) override {
    if (next_ >= files_.size()) return false;
    cv::Mat m = load(next_);
    if (m.cols != spec_.width || m.rows != spec_.height)
      throw Error(ErrorKind::Input, log::format("%s: size %dx%d differs from the first image (%dx%d)",
                                                files_[next_].c_str(), m.cols, m.rows, spec_.width, spec_.height));
    if ((m.depth() == CV_16U) != (spec_.format == PixelFormat::GRAY16))
      throw Error(ErrorKind::Input, files_[next_] + ": bit depth differs from the first image's");
    mat_to_frame(m, dst);
    ++next_;
    return true;
  }

 private:
  cv::Mat load(size_t i) {
    cv::Mat m = cv::imread(files_[i], cv::IMREAD_UNCHANGED);
    if (m.empty())
      throw Error(ErrorKind::Input, "cannot read image '" + files_[i] + "' (missing, corrupt or unsupported)");
    if (m.depth() == CV_16U && m.channels() != 1)
      throw Error(ErrorKind::Input, "'" + files_[i] + "': 16-bit colour images are not supported (16-bit gray is)");
    if (m.depth() != CV_8U && m.depth() != CV_16U)
      throw Error(ErrorKind::Input, "'" + files_[i] + "': only 8-bit images and 16-bit gray images are supported");
    return m;
  }
  std::vector<std::string> files_;
  std::string pattern_;
  FrameSpec spec_;
  size_t next_ = 0;
};

class VideoSink final : public Sink {
 public:
  VideoSink(std::string path, std::string fourcc) : path_(std::move(path)), fourcc_(std::move(fourcc)) {}
  ~VideoSink() override {
    try {
      close();
    } catch (...) {  // the engine closes first and reports; a destructor must not throw
    }
  }
  std::vector<PixelFormat> accepted_formats() const override { return {PixelFormat::BGR24, PixelFormat::GRAY8}; }
  void open(const FrameSpec& s) override {
    if (fourcc_.size() != 4)
      throw Error(ErrorKind::Usage,
                  "codec must be a four-character code (e.g. mp4v, MJPG, FFV1), got '" + fourcc_ + "'");
    int cc = cv::VideoWriter::fourcc(fourcc_[0], fourcc_[1], fourcc_[2], fourcc_[3]);
    w_ = std::make_unique<cv::VideoWriter>();
    bool color = s.format != PixelFormat::GRAY8;
    if (!w_->open(path_, cv::CAP_FFMPEG, cc, s.fps.value(), cv::Size(s.width, s.height), color))
      throw Error(ErrorKind::Output, "cannot open video output '" + path_ + "' with codec '" + fourcc_ +
                                         "' (directory missing, not writable, or codec unsupported by this OpenCV)");
  }
  // cv::VideoWriter reports no write errors: a full disk is noticed from the free space
  // while writing, and any other loss by reading the file back after closing it.
  void write(const HostFrame& f) override {
    w_->write(frame_to_mat(f));
    ++frames_;
    struct statvfs fs {};
    if (frames_ % 8 == 0 && ::statvfs(dir_of(path_).c_str(), &fs) == 0 && fs.f_bavail == 0)
      throw Error(ErrorKind::Output, log::format("the disk holding '%s' is full after %lld frames", path_.c_str(),
                                                 static_cast<long long>(frames_)));
  }
  void close() override {
    if (!w_) return;
    w_->release();  // writes the container trailer: the file stays playable
    w_.reset();
    if (frames_ == 0) return;
    cv::VideoCapture check(path_, cv::CAP_FFMPEG);
    const double n = check.isOpened() ? check.get(cv::CAP_PROP_FRAME_COUNT) : -1;
    if (!check.isOpened() || n < 1)
      throw Error(ErrorKind::Output, log::format("the video output '%s' is unreadable after %lld frames were written "
                                                 "(disk full, file size limit or write error)",
                                                 path_.c_str(), static_cast<long long>(frames_)));
    // Container frame counts of some formats are estimates from the duration: allow one.
    if (n + 1 < static_cast<double>(frames_))
      throw Error(ErrorKind::Output, log::format("only %.0f of the %lld frames written are in '%s' (disk full, file "
                                                 "size limit or write error)",
                                                 n, static_cast<long long>(frames_), path_.c_str()));
  }
  std::string describe() const override { return path_ + " (" + fourcc_ + ")"; }

 private:
  static std::string dir_of(const std::string& p) {
    const std::string d = std::filesystem::path(p).parent_path().string();
    return d.empty() ? "." : d;
  }
  std::string path_, fourcc_;
  std::unique_ptr<cv::VideoWriter> w_;
  int64_t frames_ = 0;
};

// An image sequence, or with `single` one image at the path itself.
class ImageSeqSink final : public Sink {
 public:
  explicit ImageSeqSink(std::string pattern, bool single = false) : pattern_(std::move(pattern)), single_(single) {}
  int64_t max_frames() const override { return single_ ? 1 : -1; }
  std::vector<PixelFormat> accepted_formats() const override {
    // PNG, TIFF and PGM hold 16-bit gray: a gray16le chain output is written as it is.
    std::string ext = std::filesystem::path(pattern_).extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
    if (ext == ".png" || ext == ".tif" || ext == ".tiff" || ext == ".pgm")
      return {PixelFormat::BGR24, PixelFormat::GRAY8, PixelFormat::GRAY16};
    return {PixelFormat::BGR24, PixelFormat::GRAY8};
  }
  void open(const FrameSpec& s) override {
    if (s.non_square_pixels())
      log::warn(
          "%s: these images do not record the pixels' aspect (SAR %d:%d), so viewers show them square "
          "(--lossless writes PNGs that record it)",
          pattern_.c_str(), s.sar.num, s.sar.den);
    std::filesystem::path dir = std::filesystem::path(name(0)).parent_path();
    std::error_code ec;
    if (!dir.empty()) std::filesystem::create_directories(dir, ec);
    if (ec) throw Error(ErrorKind::Output, "cannot create directory '" + dir.string() + "': " + ec.message());
    std::string ext = std::filesystem::path(pattern_).extension().string();
    if (!cv::haveImageWriter("x" + ext))
      throw Error(ErrorKind::Output, "no image writer for '" + ext + "' (use .png, .jpg, .bmp, .tif, .ppm)");
  }
  void write(const HostFrame& f) override {
    std::string path = name(n_);
    bool ok = false;
    try {
      ok = cv::imwrite(path, frame_to_mat(f));
    } catch (const cv::Exception& e) {
      throw Error(ErrorKind::Output, "cannot write '" + path + "': " + e.what());
    }
    if (!ok) throw Error(ErrorKind::Output, "cannot write '" + path + "'");
    ++n_;
  }
  void close() override {}
  std::string describe() const override { return pattern_; }

 private:
  std::string name(int64_t i) const { return single_ ? pattern_ : sequence_file_name(pattern_, i); }
  std::string pattern_;
  bool single_;
  int64_t n_ = 0;
};

}  // namespace

std::unique_ptr<Source> open_camera_source(const std::string& camera, int width, int height, double fps) {
  quiet_opencv();
  auto cap = std::make_unique<cv::VideoCapture>();
  bool is_index = !camera.empty() && std::all_of(camera.begin(), camera.end(), ::isdigit);
  bool ok = is_index ? cap->open(std::stoi(camera), cv::CAP_V4L2) : cap->open(camera, cv::CAP_V4L2);
  if (!ok)
    throw Error(ErrorKind::Input, "cannot open camera '" + camera +
                                      "' (no such device, busy, or no permission; list with "
                                      "'v4l2-ctl --list-devices')");
  if (width > 0) cap->set(cv::CAP_PROP_FRAME_WIDTH, width);
  if (height > 0) cap->set(cv::CAP_PROP_FRAME_HEIGHT, height);
  if (fps > 0) cap->set(cv::CAP_PROP_FPS, fps);
  return std::make_unique<CaptureSource>(std::move(cap), "camera " + camera, true);
}

std::unique_ptr<Source> open_video_source(const std::string& path) {
  quiet_opencv();
  bool url = path.find("://") != std::string::npos;
  if (!url) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) throw Error(ErrorKind::Input, "input '" + path + "' not found");
    if (std::filesystem::is_directory(path, ec))
      throw Error(ErrorKind::Input, "input '" + path + "' is a directory (for images use a pattern such as '" + path +
                                        "/%06d.png' or '" + path + "/*.png')");
  }
  auto cap = std::make_unique<cv::VideoCapture>();
  if (!cap->open(path, cv::CAP_FFMPEG))
    throw Error(ErrorKind::Input, "cannot open '" + path + "' as a video (unsupported or corrupt)");
  return std::make_unique<CaptureSource>(std::move(cap), path, false);
}

std::unique_ptr<Source> open_image_sequence_source(const std::string& pattern, double fps) {
  std::vector<std::string> files;
  if (pattern.find('%') != std::string::npos) {
    if (!valid_int_pattern(pattern))
      throw Error(ErrorKind::Usage, "bad image pattern '" + pattern + "' (use one %d or %0Nd, e.g. frames/%06d.png)");
    // As ffmpeg: the sequence starts at the first existing number among 0..4.
    int start = -1;
    char buf[4096];
    for (int i = 0; i <= 4 && start < 0; ++i) {
      std::snprintf(buf, sizeof buf, pattern.c_str(), i);
      if (std::filesystem::exists(buf)) start = i;
    }
    if (start < 0) throw Error(ErrorKind::Input, "no image matches '" + pattern + "'");
    for (int i = start;; ++i) {
      std::snprintf(buf, sizeof buf, pattern.c_str(), i);
      if (!std::filesystem::exists(buf)) break;
      files.push_back(buf);
    }
  } else {
    glob_t g{};
    int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
    if (rc == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) files.push_back(g.gl_pathv[i]);
    globfree(&g);
    std::sort(files.begin(), files.end());
    if (files.empty()) throw Error(ErrorKind::Input, "no image matches '" + pattern + "'");
  }
  return std::make_unique<ImageSeqSource>(std::move(files), pattern, fps);
}

std::unique_ptr<Sink> open_video_sink(const std::string& path, const std::string& fourcc) {
  quiet_opencv();
  return std::make_unique<VideoSink>(path, fourcc);
}

std::unique_ptr<Sink> open_image_sequence_sink(const std::string& pattern) {
  if (!valid_int_pattern(pattern))
    throw Error(ErrorKind::Usage, "bad image pattern '" + pattern + "' (use one %d or %0Nd, e.g. frames/%06d.png)");
  return std::make_unique<ImageSeqSink>(pattern);
}

std::unique_ptr<Sink> open_image_sink(const std::string& path) { return std::make_unique<ImageSeqSink>(path, true); }

}  // namespace vfp
