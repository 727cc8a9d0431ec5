#include "codecs/mmp/container.hpp"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>

#include <tbb/task_group.h>

#include "core/error.hpp"
#include "core/log.hpp"

namespace vfp::mmp {

namespace {
constexpr char kMagic[4] = {'V', 'M', 'M', 'P'};
// Version 2: untiled planes. Version 3: the header adds the tile grid and mode, and each
// plane's payload starts with its tile table (docs/mmp.md, "Tiles").
constexpr uint8_t kVersionUntiled = 2, kVersionTiled = 3;

int format_code(PixelFormat f) {
  return f == PixelFormat::GRAY8 ? 0 : f == PixelFormat::YUV420P ? 1 : f == PixelFormat::YUV444P ? 2 : -1;
}
void put_u32(std::vector<uint8_t>& v, uint32_t x) {
  for (int i = 0; i < 4; ++i) v.push_back(static_cast<uint8_t>(x >> (8 * i)));
}
uint32_t get_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}
constexpr size_t kHeaderBytes = 4 + 1 + 1 + 4 * 4 + 8 + 4 + 1;
// Version 3: tile width, height (luma), and a byte of the tile mode (bits 0-1) and scan (bit 2).
constexpr size_t kTileHeaderBytes = 4 + 4 + 1;
// Flag bit 6: the pixels' aspect ratio (u32 numerator, u32 denominator) follows the header.
constexpr uint8_t kAspectFlag = 64;
constexpr size_t kAspectBytes = 4 + 4;
constexpr uint32_t kMaxAspectTerm = 65535;
// Whether `spec` has non-square pixels worth recording (unknown and 1:1 are not written).
bool records_aspect(const FrameSpec& spec) {
  return spec.non_square_pixels() && static_cast<uint32_t>(spec.sar.num) <= kMaxAspectTerm &&
         static_cast<uint32_t>(spec.sar.den) <= kMaxAspectTerm;
}
// The block size in the flags byte, bits 3-4: 0 = 16x16 (what files before the option
// hold), 1 = 8x8, 2 = 32x32.
int block_code(int block_log) { return block_log == 4 ? 0 : block_log == 3 ? 1 : 2; }
int block_log_of(int code) { return code == 0 ? 4 : code == 1 ? 3 : 5; }
// The state plane `plane` is coded with, the same rule for the encoder and the decoder:
// its carried state (Cr shares Cb's with shared_chroma), or without carry, nothing for luma
// and independent chroma, and for shared chroma one fresh state per frame, created here
// when Cb asks first.
PlaneState* plane_state(const Params& p, int plane, PlaneStates* carried, std::unique_ptr<PlaneState>& frame_chroma) {
  const bool shared = p.shared_chroma && plane > 0;
  if (carried) return (*carried)[static_cast<size_t>(shared ? 1 : plane)].get();
  if (!shared) return nullptr;
  if (!frame_chroma) frame_chroma = std::make_unique<PlaneState>(p);
  return frame_chroma.get();
}

// A plane's parameters: its tiles are the frame's scaled by the plane's subsampling (a
// plane narrower or lower than luma is subsampled by 2 in that direction).
Params plane_params(const Params& p, int luma_w, int luma_h, int w, int h) {
  Params q = p;
  if (p.tiled()) {
    q.tile_w = plane_tile_size(p.tile_w, w < luma_w ? 1 : 0, p.block_log);
    q.tile_h = plane_tile_size(p.tile_h, h < luma_h ? 1 : 0, p.block_log);
  }
  return q;
}
Params plane_params(const Params& p, const ImageView& v, int plane) {
  return plane_params(p, v.pw[0], v.ph[0], v.pw[plane], v.ph[plane]);
}
}  // namespace

int64_t frame_blocks(const FrameSpec& spec, const Params& p) {
  const FrameLayout lay = FrameLayout::of(spec);
  const int64_t B = int64_t{1} << p.block_log;
  int64_t n = 0;
  for (int i = 0; i < lay.planes; ++i) n += (lay.plane[i].width + B - 1) / B * ((lay.plane[i].height + B - 1) / B);
  return n;
}

void check_frame_tiles(const FrameSpec& spec, const Params& p, ErrorKind kind) {
  check_tiles(p);
  const FrameLayout lay = FrameLayout::of(spec);
  for (int i = 0; i < lay.planes; ++i)
    check_tile_count(lay.plane[i].width, lay.plane[i].height,
                     plane_params(p, lay.plane[0].width, lay.plane[0].height, lay.plane[i].width, lay.plane[i].height),
                     kind);
}

namespace {}  // namespace

double FrameStats::psnr() const {
  return sse <= 0 ? 99.0 : 10 * std::log10(255.0 * 255.0 * static_cast<double>(samples) / sse);
}

std::string FrameStats::breakdown(double frames) const {
  return log::format("search %.3f s, coding %.3f s, dictionary updates %.3f s, post-filter %.3f s", search_s / frames,
                     coding_s / frames, learning_s / frames, post_filter_s / frames);
}

Writer::Writer(const std::string& path, const FrameSpec& spec, const Params& p) : path_(path), spec_(spec), params_(p) {
  if (format_code(spec.format) < 0)
    throw Error(ErrorKind::Usage, std::string("MMP codes gray, yuv420p and yuv444p, not ") + pix_fmt_name(spec.format) +
                                      " (add --pix-fmt yuv420p)");
  checked_block_log(p);  // before the file is created
  check_lambda(p);
  check_tiles(p);
  check_frame_tiles(spec, p, ErrorKind::Usage);
  file_.f = std::fopen(path.c_str(), "wb");
  if (!file_.f) throw Error(ErrorKind::Output, "cannot open output '" + path + "': " + std::strerror(errno));
  std::vector<uint8_t> h(kMagic, kMagic + 4);
  h.push_back(p.tiled() ? kVersionTiled : kVersionUntiled);
  h.push_back(static_cast<uint8_t>(format_code(spec.format)));
  put_u32(h, static_cast<uint32_t>(spec.width));
  put_u32(h, static_cast<uint32_t>(spec.height));
  put_u32(h, static_cast<uint32_t>(spec.fps.num));
  put_u32(h, static_cast<uint32_t>(spec.fps.den));
  uint64_t lb;
  std::memcpy(&lb, &p.lambda, 8);
  for (int i = 0; i < 8; ++i) h.push_back(static_cast<uint8_t>(lb >> (8 * i)));
  put_u32(h, static_cast<uint32_t>(p.max_dict));
  const bool aspect = records_aspect(spec);
  h.push_back(static_cast<uint8_t>((p.carry ? 1 : 0) | (p.shared_chroma ? 2 : 0) | (p.post_filter ? 4 : 0) |
                                   block_code(p.block_log) << 3 | (p.replace_least_used ? 32 : 0) |
                                   (aspect ? kAspectFlag : 0)));
  if (p.tiled()) {
    put_u32(h, static_cast<uint32_t>(p.tile_w));
    put_u32(h, static_cast<uint32_t>(p.tile_h));
    h.push_back(static_cast<uint8_t>(static_cast<int>(p.tile_mode) | static_cast<int>(p.tile_scan) << 2));
  }
  if (aspect) {
    put_u32(h, static_cast<uint32_t>(spec.sar.num));
    put_u32(h, static_cast<uint32_t>(spec.sar.den));
  }
  put(h.data(), h.size());
}

Writer::~Writer() {
  try {
    close();
  } catch (...) {
  }
}

void Writer::put(const void* p, size_t n) {
  if (std::fwrite(p, 1, n, file_.f) != n)
    throw Error(ErrorKind::Output, "cannot write to " + path_ + ": " + std::strerror(errno));
}

FrameStats encode_frame(const ImageView& v, const Params& params, const ImageView* recon,
                        std::vector<std::vector<uint8_t>>* payloads, PlaneStates* states) {
  FrameStats st;
  const auto t0 = std::chrono::steady_clock::now();
  if (payloads) payloads->clear();
  const int planes = plane_count(v.format);
  if (states)
    while (states->size() < static_cast<size_t>(planes)) states->push_back(std::make_unique<PlaneState>(params));
  // The chroma planes are coded independently, or Cr after Cb with Cb's state (shared_chroma).
  const bool shared = params.shared_chroma && planes == 3;
  std::unique_ptr<PlaneState> frame_chroma;  // only the chroma task touches it
  auto code = [&](int p) {
    const int w = v.pw[p], h = v.ph[p];
    std::vector<uint8_t> tight(static_cast<size_t>(w) * h);
    for (int y = 0; y < h; ++y) std::memcpy(&tight[static_cast<size_t>(y) * w], v.row(p, y), static_cast<size_t>(w));
    // A chroma sample of 4:2:0 stands for four pixels once upsampled, so its squared error
    // weighs about four times a luma sample's in the picture: a chroma plane's lambda scales
    // by its share of the samples, and by a further 1/2 found by measurement (docs/mmp.md):
    // 1/8 for 4:2:0, 1/2 for 4:4:4. Encoder side only.
    Params plane = plane_params(params, v, p);
    if (p > 0) plane.lambda *= 0.5 * static_cast<double>(w) * h / (static_cast<double>(v.pw[0]) * v.ph[0]);
    return encode_plane(tight.data(), w, h, plane, plane_state(params, p, states, frame_chroma));
  };
  // Luma runs beside the chroma planes on the process-wide pool (whose tiles run on it too).
  std::vector<PlaneResult> results(static_cast<size_t>(planes));
  tbb::task_group chroma;
  if (shared) {
    chroma.run([&] {
      results[1] = code(1);
      results[2] = code(2);
    });
  } else {
    for (int p = 1; p < planes; ++p) chroma.run([&, p] { results[static_cast<size_t>(p)] = code(p); });
  }
  try {
    results[0] = code(0);
  } catch (...) {
    chroma.wait();  // the chroma tasks use this frame's buffers
    throw;
  }
  chroma.wait();  // rethrows a chroma plane's error
  for (int p = 0; p < planes; ++p) {
    PlaneResult& r = results[static_cast<size_t>(p)];
    const int w = v.pw[p], h = v.ph[p];
    st.bits += 8.0 * (4 + r.bytes.size());  // with the container's length field
    st.sse += r.sse;
    st.samples += static_cast<int64_t>(w) * h;
    st.search_s += r.search_s, st.coding_s += r.coding_s, st.learning_s += r.learning_s;
    st.post_filter_s += r.post_filter_s;
    if (recon)
      for (int y = 0; y < h; ++y)
        std::memcpy(recon->row(p, y), &r.recon[static_cast<size_t>(y) * w], static_cast<size_t>(w));
    if (payloads) payloads->push_back(std::move(r.bytes));
  }
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

FrameStats Writer::write(const ImageView& f, const ImageView* recon, std::atomic<int64_t>* device_ns) {
  std::vector<std::vector<uint8_t>> planes;
  Params p = params_;
  p.device_ns = device_ns;
  const FrameStats st = encode_frame(f, p, recon, &planes, params_.carry ? &states_ : nullptr);
  append(planes);
  return st;
}

void Writer::append(const std::vector<std::vector<uint8_t>>& planes) {
  for (const auto& b : planes) {
    std::vector<uint8_t> len;
    put_u32(len, static_cast<uint32_t>(b.size()));
    put(len.data(), 4);
    put(b.data(), b.size());
  }
  if (std::fflush(file_.f) != 0)
    throw Error(ErrorKind::Output, "cannot write to " + path_ + ": " + std::strerror(errno));
}

void Writer::close() {
  if (!file_.f) return;
  FILE* f = file_.f;
  file_.f = nullptr;
  if (std::fclose(f) != 0)
    throw Error(ErrorKind::Output, "cannot finish writing " + path_ + ": " + std::strerror(errno));
}

Reader::Reader(const std::string& path) : path_(path) {
  file_.f = std::fopen(path.c_str(), "rb");
  if (!file_.f) throw Error(ErrorKind::Input, "cannot open input '" + path + "': " + std::strerror(errno));
  std::fseek(file_.f, 0, SEEK_END);
  file_size_ = std::ftell(file_.f);
  std::fseek(file_.f, 0, SEEK_SET);
  uint8_t h[kHeaderBytes];
  if (std::fread(h, 1, kHeaderBytes, file_.f) != kHeaderBytes || std::memcmp(h, kMagic, 4) != 0)
    throw Error(ErrorKind::Input, path + ": not an .mmp file (no VMMP header)");
  if (h[4] != kVersionUntiled && h[4] != kVersionTiled)
    throw Error(ErrorKind::Input,
                path + ": unsupported .mmp version " + std::to_string(h[4]) + " (this vfpipe reads versions 2 and 3)");
  const int fmt = h[5];
  if (fmt > 2) throw Error(ErrorKind::Input, path + ": unknown pixel format code " + std::to_string(fmt));
  spec_.format = fmt == 0 ? PixelFormat::GRAY8 : fmt == 1 ? PixelFormat::YUV420P : PixelFormat::YUV444P;
  const uint32_t w = get_u32(h + 6), hh = get_u32(h + 10);
  if (w == 0 || hh == 0 || w > 16384 || hh > 16384)
    throw Error(ErrorKind::Input, path + ": bad frame size " + std::to_string(w) + "x" + std::to_string(hh));
  spec_.width = static_cast<int>(w);
  spec_.height = static_cast<int>(hh);
  spec_.fps = {static_cast<int>(std::min<uint32_t>(get_u32(h + 14), 1000000)),
               static_cast<int>(std::max<uint32_t>(1, std::min<uint32_t>(get_u32(h + 18), 1000000)))};
  uint64_t lb = 0;
  for (int i = 0; i < 8; ++i) lb |= static_cast<uint64_t>(h[22 + i]) << (8 * i);
  std::memcpy(&params_.lambda, &lb, 8);
  const uint32_t md = get_u32(h + 30);
  if (md < 64 || md > 4096) throw Error(ErrorKind::Input, path + ": bad dictionary size " + std::to_string(md));
  params_.max_dict = static_cast<int>(md);
  if ((h[34] & 0x18) == 0x18 || h[34] >= 0x80)
    throw Error(ErrorKind::Input, path + ": unknown flags " + std::to_string(h[34]));
  params_.block_log = block_log_of((h[34] >> 3) & 3);
  params_.replace_least_used = (h[34] & 32) != 0;
  params_.carry = (h[34] & 1) != 0;
  params_.shared_chroma = (h[34] & 2) != 0;
  params_.post_filter = (h[34] & 4) != 0;
  size_t header = kHeaderBytes;
  if (h[4] == kVersionTiled) {
    uint8_t t[kTileHeaderBytes];
    if (std::fread(t, 1, kTileHeaderBytes, file_.f) != kTileHeaderBytes)
      throw Error(ErrorKind::Input, path + ": truncated .mmp header");
    params_.tile_w = static_cast<int>(std::min<uint32_t>(get_u32(t), 1u << 30));
    params_.tile_h = static_cast<int>(std::min<uint32_t>(get_u32(t + 4), 1u << 30));
    if ((t[8] & 3) > 2 || t[8] > 7) throw Error(ErrorKind::Input, path + ": unknown tile mode " + std::to_string(t[8]));
    params_.tile_mode = static_cast<TileMode>(t[8] & 3);
    params_.tile_scan = static_cast<TileScan>(t[8] >> 2);
    if (!params_.tiled()) throw Error(ErrorKind::Input, path + ": a version 3 file without tiles");
    try {
      check_frame_tiles(spec_, params_, ErrorKind::Input);
    } catch (const Error& e) {
      throw Error(ErrorKind::Input, path + ": bad tile grid (" + e.what() + ")");
    }
    header += kTileHeaderBytes;
  }
  if (h[34] & kAspectFlag) {
    uint8_t a[kAspectBytes];
    if (std::fread(a, 1, kAspectBytes, file_.f) != kAspectBytes)
      throw Error(ErrorKind::Input, path + ": truncated .mmp header");
    const uint32_t num = get_u32(a), den = get_u32(a + 4);
    if (num == 0 || den == 0 || num > kMaxAspectTerm || den > kMaxAspectTerm)
      throw Error(ErrorKind::Input,
                  path + ": bad pixel aspect ratio " + std::to_string(num) + ":" + std::to_string(den));
    spec_.sar = {static_cast<int>(num), static_cast<int>(den)};
    header += kAspectBytes;
  }
  // The data must be able to hold the frame the header claims (before the caller allocates it).
  const FrameLayout lay = FrameLayout::of(spec_);
  size_t need = 0;
  for (int p = 0; p < lay.planes; ++p) {
    need += 4 + min_plane_bytes(lay.plane[p].width, lay.plane[p].height, params_.block_log);
    if (params_.tiled()) {  // each tile's byte count (a byte at least), in the plane's tile table
      const int B = 1 << params_.block_log;
      const int tw =
          plane_tile_size(params_.tile_w, lay.plane[p].width < lay.plane[0].width ? 1 : 0, params_.block_log);
      const int th =
          plane_tile_size(params_.tile_h, lay.plane[p].height < lay.plane[0].height ? 1 : 0, params_.block_log);
      const int64_t W = (lay.plane[p].width + B - 1) / B * B, H = (lay.plane[p].height + B - 1) / B * B;
      need += static_cast<size_t>(((W + tw - 1) / tw) * ((H + th - 1) / th));
    }
  }
  const long data = file_size_ - static_cast<long>(header);
  if (data > 0 && static_cast<size_t>(data) < need)
    throw Error(ErrorKind::Input, path + ": " + std::to_string(data) + " bytes of data cannot hold a " +
                                      std::to_string(w) + "x" + std::to_string(hh) + " frame (at least " +
                                      std::to_string(need) + "): the header is corrupt");
  if (params_.carry)
    for (int p = 0; p < plane_count(spec_.format); ++p) states_.push_back(std::make_unique<PlaneState>(params_));
}

Reader::~Reader() = default;

bool Reader::read(HostFrame& dst, std::vector<size_t>* plane_bytes) {
  const ImageView v = dst.view();
  if (plane_bytes) plane_bytes->clear();
  std::unique_ptr<PlaneState> frame_chroma;
  for (int p = 0; p < plane_count(spec_.format); ++p) {
    uint8_t lb[4];
    const size_t got = std::fread(lb, 1, 4, file_.f);
    if (p == 0 && got == 0) return false;  // the end, between frames
    if (got != 4) throw Error(ErrorKind::Input, path_ + ": truncated in frame " + std::to_string(frames_));
    const uint32_t n = get_u32(lb);
    if (static_cast<long>(n) > file_size_ - std::ftell(file_.f))  // no allocation beyond the file
      throw Error(ErrorKind::Input, path_ + ": truncated in frame " + std::to_string(frames_) + " (plane of " +
                                        std::to_string(n) + " bytes)");
    if (n < min_plane_bytes(v.pw[p], v.ph[p], params_.block_log))
      throw Error(ErrorKind::Input, path_ + ": frame " + std::to_string(frames_) + ", plane " + std::to_string(p) +
                                        ": " + std::to_string(n) + " bytes cannot hold a " + std::to_string(v.pw[p]) +
                                        "x" + std::to_string(v.ph[p]) + " plane (corrupt)");
    std::vector<uint8_t> data(n);
    if (std::fread(data.data(), 1, n, file_.f) != n)
      throw Error(ErrorKind::Input, path_ + ": truncated in frame " + std::to_string(frames_));
    const std::vector<uint8_t> plane =
        decode_plane(data.data(), n, v.pw[p], v.ph[p], plane_params(params_, v, p),
                     plane_state(params_, p, params_.carry ? &states_ : nullptr, frame_chroma));
    for (int y = 0; y < v.ph[p]; ++y)
      std::memcpy(v.row(p, y), &plane[static_cast<size_t>(y) * v.pw[p]], static_cast<size_t>(v.pw[p]));
    if (plane_bytes) plane_bytes->push_back(n);
  }
  ++frames_;
  return true;
}

}  // namespace vfp::mmp
