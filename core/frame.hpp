// Frames: pixel formats, their memory layout, and views over host or device memory.
//
// Every frame, on the host or the device, uses the same layout: planes one after another
// in a single allocation, each row padded to a 256-byte pitch. Because host and device
// layouts are identical, an upload or download is one contiguous cudaMemcpyAsync.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/hd.hpp"

namespace vfp {

// 8-bit formats, and 16-bit planar ones (little-endian samples, as ffmpeg's gray16le /
// yuv420p16le / yuv444p16le) for stages that compute in float and should not round their
// result to 8 bits. A 16-bit sample holds the 8-bit scale times 257 (0..255 -> 0..65535).
enum class PixelFormat : int { GRAY8 = 0, YUV420P, YUV444P, BGR24, RGB24, GRAY16, YUV420P16, YUV444P16, Count };

constexpr int kMaxPlanes = 3;
constexpr size_t kPitchAlign = 256;
// v rounded up to a multiple of a.
constexpr size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

const char* pix_fmt_name(PixelFormat f);                     // ffmpeg spelling: "gray", "yuv420p", ...
bool parse_pix_fmt(const std::string& s, PixelFormat* out);  // accepts ffmpeg names + aliases
// Also ffmpeg's 9- to 14-bit planar names (yuv420p10le, yuv444p12le, gray10le, with or
// without "le"): the 16-bit format that carries them, and their depth in `bits` (8 or 16
// for the names above).
bool parse_pix_fmt(const std::string& s, PixelFormat* out, int* bits);
const std::vector<PixelFormat>& all_pixel_formats();  // every format, in enum order
// "gray, yuv420p, ..., yuv444p16le"; depth 8 or 16: only the formats of that depth.
std::string pix_fmt_list(int depth = 0);
int plane_count(PixelFormat f);
bool is_planar_yuv(PixelFormat f);  // gray, yuv420p, yuv444p (8-bit)
bool is_packed_rgb(PixelFormat f);  // bgr24, rgb24
int sample_bytes(PixelFormat f);    // bytes of one sample of one plane: 1, 2, or 3 (packed RGB)
// gray16le, yuv420p16le, yuv444p16le (constexpr: the conversion kernels use them at compile time)
constexpr VFP_HD bool is_16bit(PixelFormat f) {
  return f == PixelFormat::GRAY16 || f == PixelFormat::YUV420P16 || f == PixelFormat::YUV444P16;
}
// The same layout at 8 or 16 bits (RGB: 8 only).
constexpr VFP_HD PixelFormat with_depth(PixelFormat f, int bits) {
  using F = PixelFormat;
  switch (f) {
    case F::GRAY8:
    case F::GRAY16:
      return bits == 16 ? F::GRAY16 : F::GRAY8;
    case F::YUV420P:
    case F::YUV420P16:
      return bits == 16 ? F::YUV420P16 : F::YUV420P;
    case F::YUV444P:
    case F::YUV444P16:
      return bits == 16 ? F::YUV444P16 : F::YUV444P;
    default:
      return f;
  }
}
// Converting between the 8- and 16-bit scales (exact up; round half up down).
constexpr int kScale16 = 257;
VFP_HD int to16(int v8) { return v8 * kScale16; }
VFP_HD int to8(int v16) { return (v16 + kScale16 / 2) / kScale16; }

struct Rational {
  int num = 25, den = 1;
  double value() const { return den ? static_cast<double>(num) / den : 0.0; }
  bool known() const { return num > 0 && den > 0; }  // 0:1 and the like say "not given"
};

// Whether a frame is two interlaced fields, and which is displayed first (unknown:
// progressive).
enum class FieldOrder : uint8_t { Progressive, TopFirst, BottomFirst };

// The YUV <-> RGB matrix and the range of YUV samples (docs/formats.md#colour). Frames
// carry what their source said; Unspecified is resolved as players do: BT.709 for HD
// (wider than 1024 or taller than 576), BT.601 below, limited range.
enum class ColorMatrix : uint8_t { Unspecified, BT601, BT709, BT2020 };
enum class ColorRange : uint8_t { Unspecified, Limited, Full };
const char* color_matrix_name(ColorMatrix m);  // "bt601", "bt709", "bt2020", "unspecified"
const char* color_range_name(ColorRange r);    // "limited", "full", "unspecified"
struct ColorDesc {
  ColorMatrix matrix = ColorMatrix::Unspecified;
  ColorRange range = ColorRange::Unspecified;
  bool operator==(const ColorDesc& o) const { return matrix == o.matrix && range == o.range; }
  // Unspecified parts resolved for a width x height picture (never Unspecified after).
  ColorDesc resolved(int width, int height) const;
};

// A frame rate as ffmpeg writes one: "30", "29.97" (30000/1001), "60000/1001", "12.5".
// False for anything else, zero, negative or above 10000 (1000000 for a fraction's terms).
bool parse_frame_rate(const std::string& s, Rational* r);

struct FrameSpec {
  PixelFormat format = PixelFormat::GRAY8;
  int width = 0, height = 0;
  Rational fps{25, 1};
  ColorDesc color;  // of the YUV samples (as tagged by the source; see ColorDesc::resolved)
  // The sample (pixel) aspect ratio the source gave, e.g. 32:27 for anamorphic 720x480;
  // 0:1 unknown (players assume square). Outputs write it on.
  Rational sar{0, 1};
  // Interlaced frames (two woven fields) and the field shown first; the filters see whole
  // frames, the outputs tag the field order on.
  FieldOrder fields = FieldOrder::Progressive;
  bool non_square_pixels() const { return sar.known() && sar.num != sar.den; }
  bool operator==(const FrameSpec& o) const { return format == o.format && width == o.width && height == o.height; }
  bool operator!=(const FrameSpec& o) const { return !(*this == o); }
  std::string describe() const;  // "1920x1080 yuv420p @ 30 fps"
};

// Largest accepted width or height; keeps size arithmetic far from overflow.
constexpr int kMaxDimension = 32768;
// Throws vfp::Error (Input) for zero, negative or oversized frames.
void validate_spec(const FrameSpec& s, const char* what);

struct PlaneLayout {
  int width_bytes = 0;  // bytes of real data per row (width * sample_bytes)
  int width = 0;        // samples per row (pixels for planar, pixels for packed too)
  int height = 0;
  size_t pitch = 0;
  size_t offset = 0;
};

struct FrameLayout {
  int planes = 0;
  PlaneLayout plane[kMaxPlanes];
  size_t total_bytes = 0;    // with pitch padding
  size_t payload_bytes = 0;  // sum of width_bytes*height (what a raw/Y4M frame holds)
  static FrameLayout of(const FrameSpec& s);
};

// A non-owning view of one frame, in host or device memory. Plain data so it can be
// passed by value to CUDA kernels.
struct ImageView {
  uint8_t* data[kMaxPlanes] = {nullptr, nullptr, nullptr};
  int pitch[kMaxPlanes] = {0, 0, 0};
  int pw[kMaxPlanes] = {0, 0, 0};  // plane width in samples
  int ph[kMaxPlanes] = {0, 0, 0};  // plane height
  int width = 0, height = 0;
  PixelFormat format = PixelFormat::GRAY8;

  VFP_HD uint8_t* row(int p, int y) const { return data[p] + static_cast<size_t>(y) * pitch[p]; }
  // Rows of the 16-bit formats (pitch stays in bytes).
  VFP_HD uint16_t* row16(int p, int y) const { return reinterpret_cast<uint16_t*>(row(p, y)); }
  static ImageView over(uint8_t* base, const FrameSpec& s);
};

// Throws Error(OutOfMemory) naming `what` when `bytes` more of host memory than the machine
// has available (MemAvailable, and the address-space limit) would be needed. Linux grants
// allocations it cannot back and kills the process later, so large buffers (frame pools,
// pre-rendered caches) ask first.
void check_host_memory(size_t bytes, const std::string& what);

// A frame in host memory: page-locked (pinned) when the CUDA backend will copy it, so that
// cudaMemcpyAsync is truly asynchronous; plain aligned memory otherwise.
class HostFrame {
 public:
  HostFrame(const FrameSpec& spec, bool pinned);
  ~HostFrame();
  HostFrame(const HostFrame&) = delete;
  HostFrame& operator=(const HostFrame&) = delete;

  const FrameSpec& spec() const { return spec_; }
  const FrameLayout& layout() const { return layout_; }
  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  ImageView view() { return ImageView::over(data_, spec_); }
  ImageView view() const { return ImageView::over(data_, spec_); }
  bool pinned() const { return pinned_; }

  // Per-frame metadata travelling with the pixels.
  int64_t index = 0;       // position in the source stream
  int64_t capture_ns = 0;  // host steady-clock time when the source produced it

  // The CUDA backend gives each input frame device memory of the same layout when the
  // source can decode on the GPU (Source::can_fill_device); a source that leaves the
  // picture there sets on_device, and the host data is then not filled.
  uint8_t* device = nullptr;
  bool on_device = false;

  // Copy pixels from/to a tightly packed buffer (Y4M/raw payload order).
  void load_packed(const uint8_t* src);
  void store_packed(uint8_t* dst) const;
  bool same_pixels(const HostFrame& o) const;  // compares payload only, not padding

 private:
  FrameSpec spec_;
  FrameLayout layout_;
  uint8_t* data_ = nullptr;
  bool pinned_ = false;
};

using FramePtr = std::shared_ptr<HostFrame>;

int64_t now_ns();  // steady clock

}  // namespace vfp
