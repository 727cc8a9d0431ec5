#include "io/y4m.hpp"

#if VFPIPE_HAVE_ZLIB
#include <zlib.h>
#endif

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/signals.hpp"
#include "cpu/convert_ops.hpp"

namespace vfp {

namespace {
constexpr size_t kMaxHeader = 4096;
constexpr size_t kMaxFrameHeader = 1024;

bool parse_int(const std::string& s, int* out) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  *out = std::atoi(s.c_str());
  return true;
}
// "N:D" with both terms positive (a frame rate, a pixel aspect).
bool parse_ratio(const std::string& s, Rational* out) {
  const size_t c = s.find(':');
  int n = 0, d = 0;
  if (c == std::string::npos || !parse_int(s.substr(0, c), &n) || !parse_int(s.substr(c + 1), &d) || n <= 0 || d <= 0)
    return false;
  *out = {n, d};
  return true;
}
}  // namespace

namespace {
// ffmpeg's deeper colourspaces: 420pN, 444pN, monoN for N = 9, 10, 12, 14, 16.
bool deep_colorspace(const std::string& c, PixelFormat* f, int* bits) {
  static const std::pair<const char*, PixelFormat> layouts[] = {
      {"420p", PixelFormat::YUV420P16}, {"444p", PixelFormat::YUV444P16}, {"mono", PixelFormat::GRAY16}};
  for (const auto& [prefix, format] : layouts)
    for (int b : {9, 10, 12, 14, 16})
      if (c == prefix + std::to_string(b)) {
        *f = format;
        *bits = b;
        return true;
      }
  return false;
}
}  // namespace

Y4mHeader parse_y4m_header(const std::string& line, const std::string& name) {
  auto bad = [&](const std::string& why) { throw Error(ErrorKind::Input, name + ": not a valid Y4M stream: " + why); };
  const std::string magic = "YUV4MPEG2";
  if (line.compare(0, magic.size(), magic) != 0) bad("missing YUV4MPEG2 signature");
  Y4mHeader h;
  h.spec.width = h.spec.height = -1;
  size_t i = magic.size();
  while (i < line.size()) {
    if (line[i] == ' ') {
      ++i;
      continue;
    }
    size_t j = line.find(' ', i);
    if (j == std::string::npos) j = line.size();
    std::string tok = line.substr(i, j - i);
    std::string val = tok.substr(1);
    switch (tok[0]) {
      case 'W':
        if (!parse_int(val, &h.spec.width)) bad("bad width '" + val + "'");
        break;
      case 'H':
        if (!parse_int(val, &h.spec.height)) bad("bad height '" + val + "'");
        break;
      case 'F':
        if (!parse_ratio(val, &h.spec.fps)) bad("bad frame rate '" + val + "'");
        break;
      case 'I':
        if (val.empty()) bad("empty interlace field");
        h.interlace = val[0];
        break;
      case 'C':
        h.colorspace = val;
        break;
      case 'X':  // extensions: ffmpeg's XCOLORRANGE=FULL|LIMITED says the range
        if (val == "COLORRANGE=FULL") h.spec.color.range = ColorRange::Full;
        if (val == "COLORRANGE=LIMITED") h.spec.color.range = ColorRange::Limited;
        break;
      case 'A':  // the sample aspect ratio; 0:0 (unknown) or a malformed one is left unknown
        parse_ratio(val, &h.spec.sar);
        break;
      default:
        bad("unknown header field '" + tok + "'");
    }
    i = j;
  }
  if (h.spec.width < 0 || h.spec.height < 0) bad("the header has no W or H field");
  const std::string& c = h.colorspace;
  if (c == "420jpeg" || c == "420paldv" || c == "420mpeg2" || c == "420")
    h.spec.format = PixelFormat::YUV420P;
  else if (c == "444")
    h.spec.format = PixelFormat::YUV444P;
  else if (c == "mono")
    h.spec.format = PixelFormat::GRAY8;
  else if (!deep_colorspace(c, &h.spec.format, &h.bits))
    throw Error(ErrorKind::Input, name + ": unsupported Y4M colorspace 'C" + c +
                                      "' (supported: C420jpeg, C420paldv, C420mpeg2, C420, C444, Cmono, and at 9 to "
                                      "16 bits C420p10, C444p12, Cmono16, ...). Convert with ffmpeg, e.g. -pix_fmt "
                                      "yuv420p");
  validate_spec(h.spec, name.c_str());
  if (h.interlace == 't') h.spec.fields = FieldOrder::TopFirst;
  if (h.interlace == 'b') h.spec.fields = FieldOrder::BottomFirst;
  if (h.interlace == 'm')  // a field order per frame, which vfpipe does not read
    log::warn("%s: mixed-mode interlaced Y4M (Im) is processed and written as progressive frames", name.c_str());
  return h;
}

Y4mSource::Y4mSource(const std::string& path) : path_(path), buf_(1 << 20) {
  if (path == "-") {
    in_.fd = 0;
  } else {
    in_.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (in_.fd < 0) throw Error(ErrorKind::Input, "cannot open input '" + path + "': " + std::strerror(errno));
    in_.own_fd = true;
    if (path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0) {
#if VFPIPE_HAVE_ZLIB
      in_.gz = gzdopen(in_.fd, "rb");
      if (!in_.gz) throw Error(ErrorKind::Input, "cannot open input '" + path + "' (zlib)");
      in_.own_fd = false;  // gzclose closes it
#else
      throw Error(ErrorKind::Input,
                  "input '" + path + "': this build has no zlib; use gzip -dc " + path + " | vfpipe run -i -");
#endif
    }
  }
  std::string line;
  if (!read_line(&line, kMaxHeader)) {
    if (line.empty()) throw Error(ErrorKind::Input, describe() + ": empty input (no Y4M header)");
    throw Error(ErrorKind::Input,
                describe() + ": not a valid Y4M stream: header line missing or longer than 4096 bytes");
  }
  hdr_ = parse_y4m_header(line, describe());
  payload_.resize(FrameLayout::of(hdr_.spec).payload_bytes);
}

Y4mSource::Handle::~Handle() {
#if VFPIPE_HAVE_ZLIB
  if (gz) gzclose(static_cast<gzFile>(gz));
#endif
  if (own_fd && fd >= 0) ::close(fd);
}

Y4mSource::~Y4mSource() = default;

long Y4mSource::raw_read(void* dst, size_t n) {
#if VFPIPE_HAVE_ZLIB
  if (in_.gz) {
    auto* g = static_cast<gzFile>(in_.gz);
    const int r = gzread(g, dst, static_cast<unsigned>(std::min<size_t>(n, 1u << 30)));
    int err = Z_OK;
    const char* msg = gzerror(g, &err);
    if (r < 0 || (err != Z_OK && err != Z_BUF_ERROR))
      throw Error(ErrorKind::Input, describe() + ": corrupt compressed data (" + (msg ? msg : "zlib") + ")");
    return r;  // a truncated file (Z_BUF_ERROR) ends like a truncated .y4m
  }
#endif
  return static_cast<long>(::read(in_.fd, dst, n));
}

std::string Y4mSource::describe() const { return path_ == "-" ? "stdin (y4m)" : path_; }

size_t Y4mSource::fill(uint8_t* dst, size_t n) {
  size_t got = 0;
  while (got < n) {
    if (buf_pos_ < buf_len_) {
      size_t k = std::min(n - got, buf_len_ - buf_pos_);
      std::memcpy(dst + got, buf_.data() + buf_pos_, k);
      buf_pos_ += k;
      got += k;
      continue;
    }
    // Large reads go straight to the destination.
    if (n - got >= buf_.size()) {
      const long r = raw_read(dst + got, n - got);
      if (r > 0) {
        got += static_cast<size_t>(r);
        continue;
      }
      if (r < 0 && errno == EINTR && !stop_flag().load()) continue;
      if (r < 0 && errno != EINTR) throw Error(ErrorKind::Input, describe() + ": read error: " + std::strerror(errno));
      break;
    }
    const long r = raw_read(buf_.data(), buf_.size());
    if (r > 0) {
      buf_pos_ = 0;
      buf_len_ = static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR && !stop_flag().load()) continue;
    if (r < 0 && errno != EINTR) throw Error(ErrorKind::Input, describe() + ": read error: " + std::strerror(errno));
    break;  // EOF or interrupted by a stop request
  }
  offset_ += got;
  return got;
}

bool Y4mSource::read_line(std::string* line, size_t max_len) {
  line->clear();
  uint8_t c;
  while (line->size() <= max_len) {
    if (fill(&c, 1) != 1) return false;
    if (c == '\n') return true;
    line->push_back(static_cast<char>(c));
  }
  return false;
}

bool Y4mSource::damaged(const std::string& what) const {
  if (!ignore_errors_) throw Error(ErrorKind::Input, what);
  log::warn("%s; the stream ends there (--ignore-input-errors)", what.c_str());
  return false;
}

bool Y4mSource::read(HostFrame& dst) {
  std::string line;
  uint64_t at = offset_;
  if (!read_line(&line, kMaxFrameHeader)) {
    if (line.empty()) return false;  // clean end of stream
    if (stop_flag().load()) return false;
    return damaged(log::format("%s: truncated or corrupt Y4M: incomplete frame header at frame %lld (byte %llu)",
                               describe().c_str(), static_cast<long long>(frames_),
                               static_cast<unsigned long long>(at)));
  }
  if (line.compare(0, 5, "FRAME") != 0 || (line.size() > 5 && line[5] != ' '))
    return damaged(log::format("%s: corrupt Y4M: expected 'FRAME' at frame %lld (byte %llu)", describe().c_str(),
                               static_cast<long long>(frames_), static_cast<unsigned long long>(at)));
  size_t got = fill(payload_.data(), payload_.size());
  if (got != payload_.size()) {
    if (stop_flag().load()) return false;
    return damaged(log::format("%s: truncated Y4M: frame %lld has %zu of %zu bytes", describe().c_str(),
                               static_cast<long long>(frames_), got, payload_.size()));
  }
  dst.load_packed(payload_.data());
  if (hdr_.bits > 8 && hdr_.bits < 16) {  // to the 16-bit scale, as the libav input widens them
    const ImageView v = dst.view();
    const uint16_t max = static_cast<uint16_t>((1 << hdr_.bits) - 1);
    for (int p = 0; p < plane_count(v.format); ++p)
      for (int y = 0; y < v.ph[p]; ++y) {
        auto* row = reinterpret_cast<uint16_t*>(v.row(p, y));
        for (int x = 0; x < v.pw[p]; ++x) row[x] = conv::widen_to16(std::min(row[x], max), hdr_.bits);
      }
  }
  ++frames_;
  return true;
}

std::string y4m_header(const FrameSpec& s, int bits) {
  const char* cs = s.format == PixelFormat::YUV420P     ? "C420jpeg XYSCSS=420JPEG"
                   : s.format == PixelFormat::YUV444P   ? "C444 XYSCSS=444"
                   : s.format == PixelFormat::GRAY8     ? "Cmono XYSCSS=400"
                   : s.format == PixelFormat::YUV420P16 ? "C420p16 XYSCSS=420P16"
                   : s.format == PixelFormat::YUV444P16 ? "C444p16 XYSCSS=444P16"
                   : s.format == PixelFormat::GRAY16    ? "Cmono16 XYSCSS=400"
                                                        : nullptr;
  if (!cs) throw Error(ErrorKind::Output, std::string("Y4M cannot hold ") + pix_fmt_name(s.format));
  std::string deep;  // ffmpeg's spelling of a depth between 8 and 16 bits
  if (is_16bit(s.format) && bits > 8 && bits < 16) {
    const std::string n = std::to_string(bits);
    deep = s.format == PixelFormat::YUV420P16   ? "C420p" + n + " XYSCSS=420P" + n
           : s.format == PixelFormat::YUV444P16 ? "C444p" + n + " XYSCSS=444P" + n
                                                : "Cmono" + n + " XYSCSS=400";
    cs = deep.c_str();
  }
  // The range when known, as ffmpeg writes it (gray is full range by definition there).
  const char* range = s.format == PixelFormat::GRAY8 || s.format == PixelFormat::GRAY16 ? ""
                      : s.color.range == ColorRange::Full                               ? " XCOLORRANGE=FULL"
                      : s.color.range == ColorRange::Limited                            ? " XCOLORRANGE=LIMITED"
                                                                                        : "";
  // The sample aspect ratio when known, else square as players assume.
  const Rational a = s.sar.known() ? s.sar : Rational{1, 1};
  const char interlace = s.fields == FieldOrder::TopFirst ? 't' : s.fields == FieldOrder::BottomFirst ? 'b' : 'p';
  return log::format("YUV4MPEG2 W%d H%d F%d:%d I%c A%d:%d %s%s\n", s.width, s.height, s.fps.num, s.fps.den, interlace,
                     a.num, a.den, cs, range);
}

Y4mSink::Y4mSink(const std::string& path, int bits) : path_(path), bits_(bits) {}
Y4mSink::~Y4mSink() {
  try {
    close();
  } catch (...) {
  }
}

std::string Y4mSink::describe() const { return path_ == "-" ? "stdout (y4m)" : path_; }

void Y4mSink::open(const FrameSpec& s) {
  try {
    y4m_header(s, bits_);
  } catch (const Error& e) {
    throw Error(ErrorKind::Output, describe() + ": " + e.what());
  }
  if (!is_16bit(s.format)) bits_ = 16;  // a depth for 16-bit frames only
  if (path_ == "-") {
    f_ = stdout;
  } else {
    f_ = std::fopen(path_.c_str(), "wb");
    if (!f_) throw Error(ErrorKind::Output, "cannot open output '" + path_ + "': " + std::strerror(errno));
    own_ = true;
  }
  const std::string h = y4m_header(s, bits_);
  put(h.data(), h.size());
  payload_.resize(FrameLayout::of(s).payload_bytes);
}

void Y4mSink::put(const void* p, size_t n) {
  if (std::fwrite(p, 1, n, f_) != n)
    throw Error(ErrorKind::Output, "cannot write to " + describe() + ": " +
                                       (errno == EPIPE ? "broken pipe (the reader exited)" : std::strerror(errno)));
}

void Y4mSink::write(const HostFrame& fr) {
  static const char kFrame[] = "FRAME\n";
  put(kFrame, 6);
  fr.store_packed(payload_.data());
  if (bits_ > 8 && bits_ < 16) {  // from the 16-bit scale, rounded as the libav output narrows
    auto* w = reinterpret_cast<uint16_t*>(payload_.data());
    for (size_t i = 0; i < payload_.size() / 2; ++i) w[i] = conv::narrow_from16(w[i], bits_);
  }
  put(payload_.data(), payload_.size());
}

void Y4mSink::close() {
  if (!f_) return;
  FILE* f = f_;
  f_ = nullptr;
  bool ok = std::fflush(f) == 0;
  if (own_) ok = (std::fclose(f) == 0) && ok;
  if (!ok) throw Error(ErrorKind::Output, "cannot finish writing " + describe() + ": " + std::strerror(errno));
}

}  // namespace vfp
