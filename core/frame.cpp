#include "core/frame.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "core/error.hpp"
#include "core/log.hpp"
#if VFPIPE_HAVE_CUDA
#include "core/gpu.hpp"
#endif

namespace vfp {

namespace {
struct FmtInfo {
  const char* name;
  int planes;
};
constexpr FmtInfo kFmt[] = {{"gray", 1},  {"yuv420p", 3},  {"yuv444p", 3},     {"bgr24", 1},
                            {"rgb24", 1}, {"gray16le", 1}, {"yuv420p16le", 3}, {"yuv444p16le", 3}};
static_assert(sizeof(kFmt) / sizeof(kFmt[0]) == static_cast<size_t>(PixelFormat::Count), "one row per format");
}  // namespace

const char* pix_fmt_name(PixelFormat f) {
  int i = static_cast<int>(f);
  return (i >= 0 && i < static_cast<int>(PixelFormat::Count)) ? kFmt[i].name : "?";
}

bool parse_pix_fmt(const std::string& s, PixelFormat* out) {
  struct Alias {
    const char* name;
    PixelFormat f;
  };
  static const Alias aliases[] = {
      {"gray", PixelFormat::GRAY8},
      {"gray8", PixelFormat::GRAY8},
      {"mono", PixelFormat::GRAY8},
      {"y8", PixelFormat::GRAY8},
      {"yuv420p", PixelFormat::YUV420P},
      {"i420", PixelFormat::YUV420P},
      {"420", PixelFormat::YUV420P},
      {"yuv444p", PixelFormat::YUV444P},
      {"444", PixelFormat::YUV444P},
      {"bgr24", PixelFormat::BGR24},
      {"bgr", PixelFormat::BGR24},
      {"rgb24", PixelFormat::RGB24},
      {"rgb", PixelFormat::RGB24},
      {"gray16le", PixelFormat::GRAY16},
      {"gray16", PixelFormat::GRAY16},
      {"mono16", PixelFormat::GRAY16},
      {"yuv420p16le", PixelFormat::YUV420P16},
      {"yuv420p16", PixelFormat::YUV420P16},
      {"420p16", PixelFormat::YUV420P16},
      {"yuv444p16le", PixelFormat::YUV444P16},
      {"yuv444p16", PixelFormat::YUV444P16},
      {"444p16", PixelFormat::YUV444P16},
  };
  for (const auto& a : aliases)
    if (s == a.name) {
      *out = a.f;
      return true;
    }
  return false;
}

bool parse_pix_fmt(const std::string& s, PixelFormat* out, int* bits) {
  if (parse_pix_fmt(s, out)) {
    *bits = is_16bit(*out) ? 16 : 8;
    return true;
  }
  static const std::pair<const char*, PixelFormat> layouts[] = {
      {"gray", PixelFormat::GRAY16}, {"yuv420p", PixelFormat::YUV420P16}, {"yuv444p", PixelFormat::YUV444P16}};
  for (const auto& [prefix, f] : layouts)
    for (int b : {9, 10, 12, 14}) {
      const std::string name = prefix + std::to_string(b);
      if (s == name || s == name + "le") {
        *out = f;
        *bits = b;
        return true;
      }
    }
  return false;
}

const std::vector<PixelFormat>& all_pixel_formats() {
  static const std::vector<PixelFormat> all = [] {
    std::vector<PixelFormat> v;
    for (int i = 0; i < static_cast<int>(PixelFormat::Count); ++i) v.push_back(static_cast<PixelFormat>(i));
    return v;
  }();
  return all;
}

std::string pix_fmt_list(int depth) {
  std::string r;
  for (PixelFormat f : all_pixel_formats()) {
    if (depth != 0 && (depth == 16) != is_16bit(f)) continue;
    if (!r.empty()) r += ", ";
    r += pix_fmt_name(f);
  }
  return r;
}

int plane_count(PixelFormat f) { return kFmt[static_cast<int>(f)].planes; }
bool is_planar_yuv(PixelFormat f) {
  return f == PixelFormat::GRAY8 || f == PixelFormat::YUV420P || f == PixelFormat::YUV444P;
}
bool is_packed_rgb(PixelFormat f) { return f == PixelFormat::BGR24 || f == PixelFormat::RGB24; }
int sample_bytes(PixelFormat f) { return is_packed_rgb(f) ? 3 : is_16bit(f) ? 2 : 1; }

std::string FrameSpec::describe() const {
  std::string r = log::format("%dx%d %s", width, height, pix_fmt_name(format));
  if (fps.known()) {
    if (fps.den == 1)
      r += log::format(" @ %d fps", fps.num);
    else
      r += log::format(" @ %.3f fps", fps.value());
  }
  if (non_square_pixels()) r += log::format(" SAR %d:%d", sar.num, sar.den);
  if (fields != FieldOrder::Progressive)
    r += fields == FieldOrder::TopFirst ? " interlaced (top field first)" : " interlaced (bottom field first)";
  return r;
}

void validate_spec(const FrameSpec& s, const char* what) {
  if (s.width <= 0 || s.height <= 0)
    throw Error(ErrorKind::Input,
                log::format("%s: invalid frame size %dx%d (must be at least 1x1)", what, s.width, s.height));
  if (s.width > kMaxDimension || s.height > kMaxDimension)
    throw Error(ErrorKind::Input,
                log::format("%s: frame size %dx%d exceeds the limit of %d", what, s.width, s.height, kMaxDimension));
  if (static_cast<int>(s.format) < 0 || s.format >= PixelFormat::Count)
    throw Error(ErrorKind::Input, log::format("%s: unsupported pixel format", what));
}

FrameLayout FrameLayout::of(const FrameSpec& s) {
  FrameLayout L;
  L.planes = plane_count(s.format);
  size_t off = 0;
  for (int p = 0; p < L.planes; ++p) {
    PlaneLayout& pl = L.plane[p];
    int w = s.width, h = s.height;
    const int bpp = sample_bytes(s.format);
    if ((s.format == PixelFormat::YUV420P || s.format == PixelFormat::YUV420P16) && p > 0) {
      w = (s.width + 1) / 2;  // chroma of odd sizes rounds up, as in ffmpeg
      h = (s.height + 1) / 2;
    }
    pl.width = w;
    pl.height = h;
    pl.width_bytes = w * bpp;
    pl.pitch = align_up(static_cast<size_t>(pl.width_bytes), kPitchAlign);
    pl.offset = off;
    off += pl.pitch * static_cast<size_t>(h);
    L.payload_bytes += static_cast<size_t>(pl.width_bytes) * h;
  }
  L.total_bytes = off;
  return L;
}

ImageView ImageView::over(uint8_t* base, const FrameSpec& s) {
  FrameLayout L = FrameLayout::of(s);
  ImageView v;
  v.width = s.width;
  v.height = s.height;
  v.format = s.format;
  for (int p = 0; p < L.planes; ++p) {
    v.data[p] = base ? base + L.plane[p].offset : nullptr;
    v.pitch[p] = static_cast<int>(L.plane[p].pitch);
    v.pw[p] = L.plane[p].width;
    v.ph[p] = L.plane[p].height;
  }
  return v;
}

void check_host_memory(size_t bytes, const std::string& what) {
  uint64_t avail = UINT64_MAX;
  std::ifstream mi("/proc/meminfo");
  unsigned long long kb = 0;
  for (std::string line; std::getline(mi, line);)
    if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kb) == 1) {
      avail = kb * 1024;
      break;
    }
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) avail = std::min<uint64_t>(avail, rl.rlim_cur);
  if (bytes > avail)
    throw Error(ErrorKind::OutOfMemory,
                log::format("not enough memory for %s: it needs %.1f MiB, %.1f MiB are available", what.c_str(),
                            bytes / 1048576.0, avail / 1048576.0));
}

HostFrame::HostFrame(const FrameSpec& spec, bool pinned) : spec_(spec), layout_(FrameLayout::of(spec)) {
  size_t n = layout_.total_bytes;
#if VFPIPE_HAVE_CUDA
  if (pinned) {
    data_ = static_cast<uint8_t*>(cuda::host_alloc_pinned_frame(n));
    pinned_ = true;
    return;
  }
#else
  (void)pinned;
#endif
  data_ = static_cast<uint8_t*>(std::aligned_alloc(kPitchAlign, align_up(n, kPitchAlign)));
  if (!data_)
    throw Error(ErrorKind::OutOfMemory, log::format("out of host memory allocating a %s frame (%.1f MiB)",
                                                    spec.describe().c_str(), n / 1048576.0));
}

HostFrame::~HostFrame() {
#if VFPIPE_HAVE_CUDA
  if (pinned_) {
    cuda::host_free_pinned_frame(data_, layout_.total_bytes);
    return;
  }
#endif
  std::free(data_);
}

void HostFrame::load_packed(const uint8_t* src) {
  for (int p = 0; p < layout_.planes; ++p) {
    const PlaneLayout& pl = layout_.plane[p];
    for (int y = 0; y < pl.height; ++y) {
      std::memcpy(data_ + pl.offset + y * pl.pitch, src, pl.width_bytes);
      src += pl.width_bytes;
    }
  }
}

void HostFrame::store_packed(uint8_t* dst) const {
  for (int p = 0; p < layout_.planes; ++p) {
    const PlaneLayout& pl = layout_.plane[p];
    for (int y = 0; y < pl.height; ++y) {
      std::memcpy(dst, data_ + pl.offset + y * pl.pitch, pl.width_bytes);
      dst += pl.width_bytes;
    }
  }
}

bool HostFrame::same_pixels(const HostFrame& o) const {
  if (spec_ != o.spec_) return false;
  for (int p = 0; p < layout_.planes; ++p) {
    const PlaneLayout& pl = layout_.plane[p];
    for (int y = 0; y < pl.height; ++y)
      if (std::memcmp(data_ + pl.offset + y * pl.pitch, o.data_ + pl.offset + y * pl.pitch, pl.width_bytes) != 0)
        return false;
  }
  return true;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const char* color_matrix_name(ColorMatrix m) {
  switch (m) {
    case ColorMatrix::BT601:
      return "bt601";
    case ColorMatrix::BT709:
      return "bt709";
    case ColorMatrix::BT2020:
      return "bt2020";
    default:
      return "unspecified";
  }
}

const char* color_range_name(ColorRange r) {
  return r == ColorRange::Limited ? "limited" : r == ColorRange::Full ? "full" : "unspecified";
}

ColorDesc ColorDesc::resolved(int width, int height) const {
  ColorDesc c = *this;
  if (c.matrix == ColorMatrix::Unspecified)
    c.matrix = width > 1024 || height > 576 ? ColorMatrix::BT709 : ColorMatrix::BT601;
  if (c.range == ColorRange::Unspecified) c.range = ColorRange::Limited;
  return c;
}

bool parse_frame_rate(const std::string& s, Rational* r) {
  size_t slash = s.find('/');
  char* e = nullptr;
  if (slash != std::string::npos) {
    const std::string num = s.substr(0, slash), den = s.substr(slash + 1);
    long n = std::strtol(num.c_str(), &e, 10);
    if (*e || num.empty()) return false;
    long d = std::strtol(den.c_str(), &e, 10);
    if (den.empty()) return false;
    if (*e || n <= 0 || d <= 0 || n > 1000000 || d > 1000000) return false;
    *r = {static_cast<int>(n), static_cast<int>(d)};
    return true;
  }
  double v = std::strtod(s.c_str(), &e);
  if (*e || !(v > 0) || v > 10000) return false;
  if (std::fabs(v - std::round(v)) < 1e-9) {
    *r = {static_cast<int>(std::lround(v)), 1};
  } else {
    *r = {static_cast<int>(std::lround(v * 1000)), 1000};
    if (std::fabs(v - 29.97) < 0.01) *r = {30000, 1001};
    if (std::fabs(v - 59.94) < 0.01) *r = {60000, 1001};
    if (std::fabs(v - 23.976) < 0.01) *r = {24000, 1001};
  }
  return true;
}

}  // namespace vfp
