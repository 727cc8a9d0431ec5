// Frame sources and sinks: the edges of the pipeline, run on their own threads.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "pipeline/frame.hpp"

namespace vfp {

class Source {
 public:
  virtual ~Source() = default;
  // Format, size and rate of every frame (known once the source is open).
  virtual FrameSpec spec() const = 0;
  virtual std::string describe() const = 0;
  // Number of frames if known, else -1 (live or unknown length).
  virtual int64_t frame_count() const { return -1; }
  virtual bool is_live() const { return false; }
  // Fills `dst` (allocated for spec()). Returns false at the end of the stream.
  // Throws vfp::Error on corrupt or truncated input.
  virtual bool read(HostFrame& dst) = 0;
  // Zero-copy sources (pre-rendered pinned frames) hand out their own frames instead of
  // filling the engine's: then next_frame() is called and read() is not.
  virtual bool provides_frames() const { return false; }
  virtual FramePtr next_frame() { return nullptr; }
};

class Sink {
 public:
  virtual ~Sink() = default;
  // Formats this sink can write, preferred first.
  virtual std::vector<PixelFormat> accepted_formats() const = 0;
  // Opens the output for frames of `spec`; throws vfp::Error (Output) if it cannot.
  virtual void open(const FrameSpec& spec) = 0;
  virtual void write(const HostFrame& frame) = 0;
  // Flushes and finalises (trailer, moov atom, ...). Idempotent.
  virtual void close() = 0;
  virtual std::string describe() const = 0;
};

}  // namespace vfp
