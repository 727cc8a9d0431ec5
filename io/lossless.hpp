// Lossless outputs written with vfpipe's own DEFLATE encoder (codecs/deflate/, on the GPU
// when the run uses CUDA, else the CPU reference — the same bytes either way):
//   PngSequenceSink  frames/%06d.png: one 8-bit PNG per frame (gray, or RGB from bgr24/rgb24),
//                    rows filtered per row, written through a temporary file renamed into place.
//   Y4mGzSink        clip.y4m.gz: the Y4M stream gzip-compressed, one gzip member per frame
//                    (concatenated members are one valid .gz: `gzip -dc clip.y4m.gz` gives the
//                    .y4m back bit for bit). Each frame is flushed; a failed write (disk full)
//                    cuts the partial member off, so the file holds the complete frames.
// Both refuse a missing output directory with a clear error instead of creating it.
#pragma once
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "pipeline/source.hpp"

namespace vfp {

struct LosslessOptions {
  int level = 1;     // DEFLATE level 1..9
  bool gpu = false;  // encode on the GPU (CUDA backend)
  // vfpipe's own encoder on the CPU too (the GPU's bytes on any machine) instead of
  // libdeflate when there is no GPU.
  bool reference = false;
};

namespace deflate {
struct Options;
}

enum class DeflateFormat { Raw, Zlib, Gzip };

// vfpipe's DEFLATE and PNG encoders behind one interface: the CUDA encoder when asked for and
// a GPU is usable (host data is uploaded), else the CPU reference — the same bytes either way.
class LosslessEncoder {
 public:
  // gpu: vfpipe's CUDA encoder when a GPU is usable. Otherwise libdeflate at the same level
  // (smaller and faster than vfpipe's CPU encoder, which stays the GPU's bit-exact
  // reference in the tests), unless `reference` asks for that one.
  LosslessEncoder(int level, bool gpu, bool reference = false);
  ~LosslessEncoder();
  bool on_gpu() const { return gpu_ != nullptr; }
  // "GPU", "libdeflate" or "vfpipe CPU reference".
  const char* engine() const;
  // PNG of an 8-bit image (1, 3 or 4 channels; swap_rb: BGR(A) pixels) at this level.
  std::vector<uint8_t> png(const uint8_t* img, size_t pitch, int w, int h, int ch, bool swap_rb);
  std::vector<uint8_t> compress(const uint8_t* p, size_t n, const deflate::Options& opt, DeflateFormat f);

 private:
  struct Gpu;
  struct LibDeflate;
  int level_;
  std::unique_ptr<Gpu> gpu_;
  std::unique_ptr<LibDeflate> libdeflate_;  // when neither the GPU nor the reference
};

class PngSequenceSink final : public Sink {
 public:
  PngSequenceSink(std::string pattern, const LosslessOptions& opt);
  ~PngSequenceSink() override;
  std::vector<PixelFormat> accepted_formats() const override {
    return {PixelFormat::BGR24, PixelFormat::GRAY8, PixelFormat::RGB24};
  }
  void open(const FrameSpec& spec) override;
  void write(const HostFrame& f) override;
  void close() override {}
  std::string describe() const override;
  std::string name(int64_t i) const;  // path of frame i (numbered from 1, as ffmpeg)
  // A path without a %d pattern is one image (ffmpeg's -frames:v 1 out.png).
  int64_t max_frames() const override { return single() ? 1 : -1; }
  bool single() const { return pattern_.find('%') == std::string::npos; }

 private:
  std::string pattern_;
  LosslessOptions opt_;
  std::unique_ptr<LosslessEncoder> enc_;
  Rational sar_{0, 1};  // the pixels' aspect, recorded where not square
  int64_t n_ = 0;
};

class Y4mGzSink final : public Sink {
 public:
  Y4mGzSink(std::string path, const LosslessOptions& opt);
  ~Y4mGzSink() override;
  std::vector<PixelFormat> accepted_formats() const override {
    return {PixelFormat::YUV420P,   PixelFormat::YUV444P,   PixelFormat::GRAY8,
            PixelFormat::YUV420P16, PixelFormat::YUV444P16, PixelFormat::GRAY16};
  }
  void open(const FrameSpec& spec) override;
  void write(const HostFrame& f) override;
  void close() override;
  std::string describe() const override;

 private:
  std::string path_, header_;
  LosslessOptions opt_;
  std::unique_ptr<LosslessEncoder> enc_;
  FILE* f_ = nullptr;
  std::vector<uint8_t> buf_;
  uint64_t complete_bytes_ = 0;  // file size after the last complete member
  int64_t frames_ = 0;
};

// Checks that the directory `path` would be written into exists and is a directory.
void require_output_dir(const std::string& path);

}  // namespace vfp
