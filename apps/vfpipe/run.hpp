// What `run` shares with `batch`: the options of one stream (input, filters, output and the
// encoder's settings) and the steps that open, check and configure a pipeline from them.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/frame.hpp"
#include "core/stage.hpp"
#include "io/open.hpp"
#include "pipeline/chain.hpp"
#include "pipeline/engine.hpp"

namespace vfp {

struct RunArgs {
  std::string positional_output;  // the output as ffmpeg takes it: last, without -o
  std::string input, output = "null", filters, device = "auto", pix_fmt, report, codec, policy, sendcmd;
  std::string size, profile, display, view = "split", screenshot;
  std::string vsync = "on";
  int screenshot_every = 0;
  bool no_display = false, no_hud = false, glass_to_glass = false;
  double g2g_period = 250;
  std::string save_dir = ".";
  double fps = 0;
  int64_t frames = -1;
  int depth = 0, queue = 4, warmup = 0, trace_frames = 600;  // depth 0: default_depth()
  // -re: read at the input's rate; --no-realtime: as fast as possible; neither: by command (live paces files)
  bool realtime = false, no_realtime = false;
  std::string completion = "event";
  size_t profile_frames = 100000;
  bool report_frames = false, no_progress = false, quiet = false, verbose = false;
  bool lossless = false;
  int compression_level = 1;
  std::string deflate_engine = "auto";
  double stats_every = 0;
  // Video files (FFmpeg's options).
  int crf = -1, gop = -1;
  std::string rate;    // -r
  std::string aspect;  // -aspect
  // -color_primaries, -color_trc, -colorspace, -color_range: a video file's colour tags.
  std::string color_primaries, color_trc, colorspace, color_range;
  std::string preset, bitrate, codec_params;
  std::vector<std::string> encoder_opts;   // --encoder-opt KEY=VALUE (-tune, -profile:v, -maxrate, ...)
  std::vector<std::string> metadata;       // -metadata KEY=VALUE
  std::string audio_codec, audio_bitrate;  // -c:a, -b:a
  std::string subtitle_codec;              // -c:s
  int audio_rate = 0, audio_channels = 0;  // -ar, -ac
  bool no_audio = false, no_subtitles = false, no_data = false, overwrite = false, no_overwrite = false,
       ignore_input_errors = false;
  double start = 0, duration = -1, to = -1;
  std::string loglevel, progress_file;
  std::string hwaccel = "auto";         // -hwaccel: NVDEC for video files
  std::string hwaccel_output = "auto";  // -hwaccel_output_format: NVDEC frames in GPU or host memory
  int codec_threads = 0;                // threads of each video decoder and encoder (0: libavcodec picks)
  std::vector<std::string> map;         // -map: the input's streams to filter and copy
  std::string movflags;                 // -movflags
};

// The options every stream has, in `run`, `live`, `profile` and `batch`: backend, pixel
// format, engine depth, the encoder's settings, trimming, log level.
void add_common_options(CLI::App* c, RunArgs& a);
// -q, -v and -loglevel set the log level (and -loglevel quiet sets `quiet`).
void apply_log_options(RunArgs& a);
// --pix-fmt, checked.
std::optional<PixelFormat> forced_format(const RunArgs& a);
// The encoder's depth that --pix-fmt names (10 for yuv420p10le), or 0 (the input's).
int forced_bits(const RunArgs& a);
// CUDA when asked for or usable and every stage has it; CPU otherwise, with a warning.
Backend choose_backend(const std::string& device, const std::vector<std::unique_ptr<Stage>>& stages);
// The input's options; throws vfp::ParseError for a malformed -map.
SourceOptions source_options(const RunArgs& a, Backend backend);
// Opens a.output for this source (the encoder's options, overwrite rule, single-image check).
std::unique_ptr<Sink> open_output(const RunArgs& a, Backend backend, const Source& src);
// The frames in flight when --depth is not given: 3, or for a batch run (not live) on the
// CUDA backend as many as the stages ask for (Stage::frames_in_flight(); at most 64).
int default_depth(bool batch, Backend backend, const std::vector<const Stage*>& stages);
std::vector<const Stage*> stages_of(const Chain& chain);
std::vector<const Stage*> stages_of(const std::vector<std::unique_ptr<Stage>>& stages);
EngineConfig engine_config(const RunArgs& a, bool live, Backend backend, const Source& src, const Chain& chain);

}  // namespace vfp
