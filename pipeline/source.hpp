// Frame sources and sinks: the edges of the pipeline, run on their own threads.
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "core/frame.hpp"

struct CUstream_st;

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
  // A source that decodes on the GPU of the run (NVDEC) can leave frames there: read() then
  // fills HostFrame::device, when the engine gave one, instead of the host data.
  virtual bool can_fill_device() const { return false; }
  // Frame `index`'s presentation time in seconds (any origin), once read; < 0 where the
  // source has none. A paced run plays frames by it (a variable frame rate too).
  virtual double time_of(int64_t index) const {
    (void)index;
    return -1;
  }
  // Whether the source applied SourceOptions' start and duration itself (by its timestamps);
  // otherwise open_source() counts frames at the source's rate.
  virtual bool handles_time_window() const { return false; }
  // The depth of the samples 16-bit frames carry where it is less (9 to 14: a 10-bit Y4M
  // or video); 0 where it is the format's own or unknown. Outputs keep it where they can.
  virtual int sample_bits() const { return 0; }
};

struct FrameRecord;

// The CUDA backend's way into a sink that lives on the GPU too (the display): after the
// stages, the worker hands it the device frames; it copies them, in stream order, into a
// slot of its own and returns the slot (or -1: none free, the frame goes the host way).
class DeviceTap {
 public:
  virtual ~DeviceTap() = default;
  virtual int copy(const uint8_t* out_dev, const uint8_t* src_dev, CUstream_st* stream) = 0;
};

// What the engine hands a sink with each frame (write_frame).
struct OutFrame {
  const HostFrame& frame;             // the chain's output
  const HostFrame* source = nullptr;  // the chain's input, if the sink wants_source()
  FrameRecord* record = nullptr;      // its timings (steps as in `steps`); a display stamps display_ns
  const std::vector<std::string>* steps = nullptr;
  int64_t dropped = 0;     // frames the live policy dropped so far
  size_t backlog = 0;      // frames already waiting behind this one
  int device_slot = -1;    // DeviceTap slot holding this frame, or -1
  bool host_valid = true;  // `frame` holds the data (false: only the slot does)
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

  // Sinks that show the input next to the output (the display) get it in write_frame.
  virtual bool wants_source() const { return false; }
  // Called instead of write() by the engine, on the sink thread.
  virtual void write_frame(const OutFrame& f) { write(f.frame); }
  // On the sink thread: before the first frame (the display makes its GL context there)
  // and after the last (it releases it).
  virtual void begin_stream() {}
  virtual void end_of_stream() {}
  // CUDA backend, worker thread, before the first frame: the sink's device tap, if it has
  // one. May wait until begin_stream() has run.
  virtual DeviceTap* device_tap() { return nullptr; }
  // Whether write_frame() reads the host copy of frames its device tap took (asked per
  // frame, from the worker thread): when not, the CUDA backend skips their download and
  // such frames never return to host memory.
  virtual bool needs_host_frames() const { return true; }
  // The most frames the output can hold (a single image: 1); -1 for no limit.
  virtual int64_t max_frames() const { return -1; }
  // A sink can ask the engine to stop (the display's window was closed): the source stops,
  // the frames in flight are finished.
  bool stop_requested() const { return stop_.load(); }
  // While true, a paced source (a file played at its rate) reads nothing and its clock
  // stands still: the display is paused, and a played file waits for it as a player would
  // instead of its frames being dropped. A live source (a camera) does not wait.
  bool holds_source() const { return hold_.load(); }

 protected:
  void request_stop() { stop_ = true; }
  void hold_source(bool on) { hold_ = on; }

 private:
  std::atomic<bool> stop_{false}, hold_{false};
};

}  // namespace vfp
