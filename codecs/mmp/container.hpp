// The .mmp file: a stream of MMP-coded frames (docs/mmp.md, "Container").
//   header  "VMMP", version (2, or 3 tiled), pixel format (0 gray, 1 yuv420p, 2 yuv444p), width, height,
//           frame rate num/den (u32 little-endian each), lambda (f64), dictionary size (u32),
//           flags (u8; bit 0: dictionaries and models carried across frames; bit 1: the
//           second chroma plane continues the first's dictionaries and models; bit 2: each
//           plane's stream ends with a post-filter the decoder applies; bits 3-4: block
//           size; bit 5: full dictionary scales replace their least used element; bit 6:
//           the pixels' aspect ratio follows the header);
//           version 3 (tiled) adds the tile width and height (u32, luma samples) and a byte
//           of the tile mode (bits 0-1) and the round order (bit 2: wavefront);
//           then, with flag bit 6, the pixels' aspect ratio (u32 numerator, denominator)
//   frame   for each plane: payload length (u32) and the plane's range-coded payload
// Frames are independent (each plane starts from fresh dictionaries and models) unless the
// carry flag is set.
#pragma once
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "codecs/mmp/mmp.hpp"
#include "core/frame.hpp"

namespace vfp::mmp {

struct FrameStats {
  double bits = 0, sse = 0, seconds = 0;
  int64_t samples = 0;
  // The planes' PlaneResult times, summed (seconds over threads).
  double search_s = 0, coding_s = 0, learning_s = 0, post_filter_s = 0;
  double psnr() const;  // over all planes (sample-weighted)
  FrameStats& operator+=(const FrameStats& o) {
    bits += o.bits;
    sse += o.sse;
    seconds += o.seconds;
    samples += o.samples;
    search_s += o.search_s, coding_s += o.coding_s, learning_s += o.learning_s, post_filter_s += o.post_filter_s;
    return *this;
  }
  // "search 0.420 s, coding 0.030 s, dictionary updates 0.050 s, post-filter 0.010 s",
  // each divided by `frames`.
  std::string breakdown(double frames = 1) const;
};

// Per-plane dictionaries and models carried from frame to frame (Params::carry; with
// Params::shared_chroma, entry 1 serves both chroma planes).
using PlaneStates = std::vector<std::unique_ptr<PlaneState>>;

// Codes every plane of `f`; the payloads go to `payloads` and the reconstruction to `recon`
// (same format and size) when given. With `states` (created on first use) each plane
// continues from what the previous frames learned; without, it starts fresh (Cr from what
// Cb learned in this frame, with Params::shared_chroma).
FrameStats encode_frame(const ImageView& f, const Params& p, const ImageView* recon,
                        std::vector<std::vector<uint8_t>>* payloads = nullptr, PlaneStates* states = nullptr);

// Throws vfp::Error (`kind`) when p's tiles do not fit frames of `spec` (check_tiles,
// check_tile_count for every plane).
void check_frame_tiles(const FrameSpec& spec, const Params& p, ErrorKind kind);
// The blocks encode_frame() codes in a frame of `spec` (every plane's, padded to whole
// blocks): what Params::blocks_coded reaches when the frame is done.
int64_t frame_blocks(const FrameSpec& spec, const Params& p);

// An open C stream that closes itself: also when a constructor throws after opening it.
struct OwnedFile {
  FILE* f = nullptr;
  OwnedFile() = default;
  OwnedFile(const OwnedFile&) = delete;
  OwnedFile& operator=(const OwnedFile&) = delete;
  ~OwnedFile() {
    if (f) std::fclose(f);
  }
};

class Writer {
 public:
  // Throws vfp::Error (Output / Usage for formats other than gray, yuv420p, yuv444p).
  Writer(const std::string& path, const FrameSpec& spec, const Params& p);
  ~Writer();
  // Encodes `f`; its reconstruction goes to `recon` when given (same spec). `device_ns`:
  // Params::device_ns for this frame.
  FrameStats write(const ImageView& f, const ImageView* recon = nullptr, std::atomic<int64_t>* device_ns = nullptr);
  // Appends a frame encoded elsewhere (encode_frame() with params(), no plane states: frames
  // without carry, which can be encoded several at once): its planes' payloads, in order.
  void append(const std::vector<std::vector<uint8_t>>& planes);
  const Params& params() const { return params_; }
  // Where the encoder's search runs from the next frame on (Params::search; not in the
  // stream: the bytes stay the same).
  void set_search(std::shared_ptr<LeafSearch> search) { params_.search = std::move(search); }
  void close();

 private:
  void put(const void* p, size_t n);
  std::string path_;
  FrameSpec spec_;
  Params params_;
  PlaneStates states_;
  OwnedFile file_;
};

class Reader {
 public:
  explicit Reader(const std::string& path);  // throws vfp::Error (Input) for a bad header
  ~Reader();
  const FrameSpec& spec() const { return spec_; }
  const Params& params() const { return params_; }
  // Next frame; false at the end. Throws vfp::Error (Input) for corrupt or truncated data.
  bool read(HostFrame& dst, std::vector<size_t>* plane_bytes = nullptr);

 private:
  std::string path_;
  FrameSpec spec_;
  Params params_;
  PlaneStates states_;
  OwnedFile file_;
  long file_size_ = 0;
  int64_t frames_ = 0;
};

}  // namespace vfp::mmp
