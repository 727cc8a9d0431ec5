// Turns the user's -i / -o strings into sources and sinks.
//
// Inputs:  "-" (Y4M on stdin), "*.y4m", "synthetic=..." , "camera=0" / "/dev/video0",
//          image sequences ("img_%04d.png", "frames/*.png"), anything else: a video file or
//          URL, opened by FFmpeg's libraries (io/libav.hpp; OpenCV in builds without them).
// Outputs: "null" (discard), "-" (Y4M on stdout), "*.y4m", "*.y4m.gz" (gzip, our DEFLATE),
//          "frames/%06d.png" (OpenCV; with `lossless`, or without OpenCV, our PNG encoder),
//          or a video file (libav: H.264 by default, FFV1 for .mkv with `lossless`, -c:v to choose).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "io/libav.hpp"
#include "pipeline/source.hpp"

namespace vfp {

struct SourceOptions {
  bool pinned = false;               // frames cached by the source go to pinned memory (CUDA backend)
  int width = 0, height = 0;         // camera capture size request
  double fps = 0;                    // camera request / image-sequence rate
  double start = 0;                  // -ss: seconds into a video file
  double duration = -1;              // -t: seconds of a video file to process (< 0: all)
  bool ignore_input_errors = false;  // a truncated video file: a warning, not an error
  // Hardware decoding of video files (-hwaccel): "auto" (NVDEC on the CUDA backend when the
  // codec and GPU have it, else the CPU decoder), "cuda" (NVDEC or an error), "none".
  std::string hwaccel = "auto";
  // Where NVDEC's frames go (-hwaccel_output_format): "auto" (GPU memory on the CUDA
  // backend), "cuda" (GPU memory: the CUDA backend only), "host".
  std::string hwaccel_output = "auto";
  int codec_threads = 0;       // the video decoder's threads (0: libavcodec picks); a batch shares the cores
  std::vector<StreamMap> map;  // -map (video files): the stream to filter and those to copy
};
std::unique_ptr<Source> open_source(const std::string& spec, const SourceOptions& opt);

enum class Overwrite { Refuse, Yes, No };  // an existing output file: error, -y, -n
inline Overwrite overwrite_rule(bool yes, bool no) {
  return yes ? Overwrite::Yes : no ? Overwrite::No : Overwrite::Refuse;
}

struct SinkOptions {
  std::string codec;               // -c:v encoder name (OpenCV builds: a fourcc); empty: by extension
  bool lossless = false;           // image sequences by vfpipe's PNG encoder; lossy outputs refused
  int compression_level = 1;       // DEFLATE level of PNG / .y4m.gz outputs
  bool gpu = false;                // the run uses CUDA: so does the DEFLATE of those outputs
  bool deflate_reference = false;  // vfpipe's DEFLATE on the CPU too, not libdeflate (--deflate-engine vfpipe)
  VideoOptions video;              // video files (libav): quality, the input's streams and timestamps
  Overwrite overwrite = Overwrite::Refuse;
};
std::unique_ptr<Sink> open_sink(const std::string& spec, const SinkOptions& opt);
// FFmpeg's rule for a file about to be written: an existing one is replaced only with -y
// (Overwrite::Yes), kept with -n (an Output error), else a usage error that says so.
void check_overwrite(const std::string& path, Overwrite o);
// An output that is the input's own file (or the same image pattern) would be truncated
// before its frames are read: refused whatever -y says, as ffmpeg refuses "Output same as
// Input". Pipes, null and names that are not files pass.
void check_output_is_not_input(const std::string& input, const std::string& output);
// Whether two names are one file: the same file where both exist, else the same path once
// resolved (so also for outputs not written yet and image patterns).
bool same_file(const std::string& a, const std::string& b);
// The input's streams besides its video (audio, subtitles, data) that the output `spec`
// cannot hold (vfpipe's own outputs, Y4M, PNG and .mmp, hold video only; video files copy
// what their container can and say what they leave out): one warning a stream, or, when
// -map chose them, an error (Usage). Nothing for null outputs. `keep`: -an, -sn and -dn.
// An HDR input (PQ or HLG) into such an output is warned of too: its transfer is lost.
void report_streams_left_out(const Source& src, const std::string& spec, const VideoOptions& keep);
// What vfpipe sees in an opened input, a line a fact (`vfpipe info INPUT`): its frames, their
// depth and colour, HDR, length and the other streams. Reads the first frame (a decoder
// shows some metadata only there).
std::vector<std::string> describe_input(Source& src);

class NullSink final : public Sink {
 public:
  std::vector<PixelFormat> accepted_formats() const override { return {}; }
  void open(const FrameSpec&) override {}
  void write(const HostFrame&) override { ++frames_; }
  void close() override {}
  std::string describe() const override { return "null"; }
  bool needs_host_frames() const override { return false; }
  int64_t frames() const { return frames_; }

 private:
  int64_t frames_ = 0;
};

bool have_opencv();
// An image pattern with exactly one %d-style conversion (optionally %0Nd).
bool valid_int_pattern(const std::string& pattern);
// The file name of frame `index` (0-based) of an image-sequence output: numbered from 1, as ffmpeg.
std::string sequence_file_name(const std::string& pattern, int64_t index);

}  // namespace vfp
