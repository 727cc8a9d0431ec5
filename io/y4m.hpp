// YUV4MPEG2 (Y4M) reader and writer: the uncompressed stream format that lets vfpipe sit
// in an ffmpeg pipe:  ffmpeg -i in.mp4 -f yuv4mpegpipe - | vfpipe run -i - -o - | ffmpeg -i - out.mp4
// Supported: 8-bit C420jpeg/C420paldv/C420mpeg2/C420, C444 and Cmono; others are rejected
// with a clear error. Our own reader: malformed headers or truncated frames raise
// vfp::Error, never crash.
#pragma once
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "pipeline/source.hpp"

namespace vfp {

struct Y4mHeader {
  FrameSpec spec;
  std::string colorspace = "420jpeg";
  char interlace = 'p';
  // The samples' depth: 8, 16, or 9 to 14 (ffmpeg's C420p10 and the like: 16-bit words
  // holding 0..2^bits-1, which the frames carry widened to the 16-bit scale).
  int bits = 8;
};
// Parses the header line (without the trailing '\n'). Throws vfp::Error(Input).
Y4mHeader parse_y4m_header(const std::string& line, const std::string& name);
// The stream header line (with its newline) for frames of `spec`; throws vfp::Error (Output)
// for formats Y4M cannot hold. `bits` 9 to 14: the 16-bit formats as ffmpeg writes that
// depth (C420p10, ...).
std::string y4m_header(const FrameSpec& spec, int bits = 16);

// Reads "-" (stdin), a .y4m file, or a gzip-compressed one (.y4m.gz, as vfpipe's Y4mGzSink
// writes; builds with zlib), whose corrupt or truncated data is reported like a bad Y4M.
class Y4mSource final : public Source {
 public:
  explicit Y4mSource(const std::string& path);
  ~Y4mSource() override;
  FrameSpec spec() const override { return hdr_.spec; }
  int sample_bits() const override { return hdr_.bits > 8 && hdr_.bits < 16 ? hdr_.bits : 0; }
  std::string describe() const override;
  bool read(HostFrame& dst) override;
  // A stream that breaks (truncated, corrupt frame header) ends with a warning instead of
  // an error (--ignore-input-errors): the frames before it are the stream.
  void set_ignore_errors(bool on) { ignore_errors_ = on; }

 private:
  // Throws Error(Input) with `what`, or warns and returns false when errors are ignored.
  bool damaged(const std::string& what) const;
  bool ignore_errors_ = false;
  size_t fill(uint8_t* dst, size_t n);  // reads up to n bytes; fewer only at EOF/interrupt
  long raw_read(void* dst, size_t n);   // read(2), or gzread for .gz
  bool read_line(std::string* line, size_t max_len);
  std::string path_;
  // The open input. A member, so that it is closed also when the constructor throws (a bad
  // or empty header).
  struct Handle {
    int fd = -1;
    bool own_fd = false;
    void* gz = nullptr;  // gzFile for .y4m.gz; gzclose closes fd
    Handle() = default;
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;
    ~Handle();
  } in_;
  Y4mHeader hdr_;
  std::vector<uint8_t> buf_;  // read buffer
  size_t buf_pos_ = 0, buf_len_ = 0;
  std::vector<uint8_t> payload_;
  int64_t frames_ = 0;
  uint64_t offset_ = 0;  // bytes consumed, for error messages
};

class Y4mSink final : public Sink {
 public:
  // "-" writes stdout. `bits` 9 to 14: 16-bit frames are written at that depth (ffmpeg's
  // C420p10, ...; -pix_fmt yuv420p10le), else as they are.
  explicit Y4mSink(const std::string& path, int bits = 16);
  ~Y4mSink() override;
  std::vector<PixelFormat> accepted_formats() const override {
    return {PixelFormat::YUV420P,   PixelFormat::YUV444P,   PixelFormat::GRAY8,
            PixelFormat::YUV420P16, PixelFormat::YUV444P16, PixelFormat::GRAY16};
  }
  void open(const FrameSpec& spec) override;
  void write(const HostFrame& f) override;
  void close() override;
  std::string describe() const override;

 private:
  void put(const void* p, size_t n);
  std::string path_;
  int bits_ = 16;
  FILE* f_ = nullptr;
  bool own_ = false;
  std::vector<uint8_t> payload_;
};

}  // namespace vfp
