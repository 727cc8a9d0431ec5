// `vfpipe run`, `live` and `profile`: a source through the filter chain into a sink.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>

#include "apps/vfpipe/cli.hpp"
#include "apps/vfpipe/progress.hpp"
#include "apps/vfpipe/run.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/signals.hpp"
#include "display/controls.hpp"
#include "io/open.hpp"
#include "pipeline/chain.hpp"
#include "pipeline/commands.hpp"
#include "pipeline/engine.hpp"
#include "pipeline/profile.hpp"
#include "stages/builtin.hpp"
#if VFPIPE_HAVE_GL
#include "display/display_sink.hpp"
#endif
#if VFPIPE_HAVE_LIBAV
#include "io/libav.hpp"
#endif
#if VFPIPE_HAVE_CUDA
#include "core/gpu.hpp"
#endif

namespace vfp {
namespace {

const char* kExamples = R"(
Examples:
  # Wavelet-denoise a generated noisy clip (BayesShrink, sigma estimated per plane), as Y4M:
  vfpipe run -i "synthetic=size=1280x720:frames=300:noise=gauss:sigma=20" -f "wavelet=db4:levels=3" -o out.y4m

  # Compose with ffmpeg through Y4M pipes:
  ffmpeg -i in.mp4 -f yuv4mpegpipe - | vfpipe run -i - -f null -o - | ffmpeg -i - out.mp4

  # Lossless archive of a filtered stream (PNG per frame, DEFLATE on the GPU; or .y4m.gz):
  vfpipe run -i clip.mp4 -f "wavelet" -o frames/%06d.png --lossless
  vfpipe run -i clip.y4m -f "median" -o filtered.y4m.gz && gzip -dc filtered.y4m.gz | ffplay -

  # Video file to an image sequence, on the CPU, with a JSON timing report:
  vfpipe run -i clip.mp4 -o frames/%06d.png --device cpu --report timing.json

  # Change options while running (FFmpeg sendcmd style): lines 'FRAME FILTER key=value:...'
  printf '100 conv kernel=sharpen:amount=2\n200 median radius=3\n' > cmds.txt
  vfpipe run -i clip.mp4 -f "median,conv=gauss" --sendcmd cmds.txt -o out.mp4

  # Live webcam processing (newest frame wins, dropped frames are counted):
  vfpipe live -i camera=0 -f "format=gray" -o recording.mp4

Inputs (-i):  -  (Y4M on stdin) | file.y4m | synthetic=KEY=VAL:... | camera=N | /dev/videoN
              | video file or URL | image sequence: img_%04d.png or 'frames/*.png'
Outputs (-o): null (default) | -  (Y4M on stdout) | file.y4m | file.mp4/.mov/.avi/.mkv
              | image sequence: frames/%06d.png (--lossless: vfpipe's PNG encoder, GPU DEFLATE)
              | file.y4m.gz: bit-exact archive, gzip by vfpipe's DEFLATE (gzip -dc gives the .y4m)
Filters (-f): FFmpeg syntax, name=key=value:key=value,name2=...  ('vfpipe filters' lists them)
Exit status:  0 ok, 1 error, 2 bad usage, 130/143 stopped by SIGINT/SIGTERM (output closed cleanly)
)";

const char* kLiveHelp = R"(
Example: vfpipe live -i camera=0 -f "median=radius=2" -o rec.mp4
         vfpipe live -i clip.mp4 -f wavelet      # a file plays at its rate (--no-realtime: as fast as it goes)
A window shows the output (--no-display: none; --display headless: EGL, PNG screenshots).
Keys: Esc/Q quit (output closed properly) | Space pause | N next frame | 1-4 view: filtered,
split (drag the divider), side by side, difference | Tab next stage | +/- its main parameter
(median radius, conv preset, wavelet threshold) | T switch it off/on | S screenshot | R record
| H HUD | F1 help.
Ctrl-C stops too.
)";

const char* kProfileHelp = R"(
Every frame's host timestamps (read, capture, enqueue, submit, done, write, output) and
the GPU time of each copy and stage (CUDA events, read back without stalling) are kept
in memory (the newest --profile-frames). The first --warmup frames (default 10 here) are
left out, unless the run has no more frames than that. Printed: per step and end to end, count/min/mean/p50/p90/p95/p99/max, the
steady-state throughput, drops, and the fraction of copy time hidden behind compute.

Examples:
  vfpipe profile -i "synthetic=size=1920x1080:frames=600" -f "median=radius=2,wavelet" --prefix base
  # -> base.json, base.trace.json (ui.perfetto.dev / chrome://tracing), base.html (plots)
  vfpipe run -i clip.mp4 -f conv=gauss -o out.mp4 --profile run1    # profile any run
  vfpipe profile --compare base.json new.json --fail-above 5          # regressions: exit 1
  nsys profile vfpipe run -i ...      # NVTX ranges: threads, streams, stages, copies
)";

}  // namespace

void add_common_options(CLI::App* c, RunArgs& a) {
  c->add_option("-d,--device", a.device, "backend: auto (CUDA if a GPU is usable), cuda, cpu")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->capture_default_str();
  c->add_option("--pix-fmt", a.pix_fmt,
                "output pixel format (" + pix_fmt_list(8) + "; 16-bit: " + pix_fmt_list(16) +
                    "; a video file's encoder also at 9 to 14 bits: yuv420p10le, yuv444p12le, gray10le, ...)");
  c->add_option("-n,--frames", a.frames, "stop after N input frames");
  c->add_option("--depth", a.depth,
                "frames in flight on the GPU (CUDA streams), 2..64 [default: 3; 8 for a file through the mmp stage "
                "on the GPU, 8 a GPU with its gpus=N]")
      ->check(CLI::Range(2, 64));
  c->add_option("--completion", a.completion,
                "CUDA: how a finished frame is noticed: event (a thread waits on its download event) or "
                "hostfunc (a cudaLaunchHostFunc callback)")
      ->check(CLI::IsMember({"event", "hostfunc"}))
      ->capture_default_str();
  c->add_option("--queue", a.queue, "capacity of the source and sink queues, 1..64")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  c->add_option(
      "--codec", a.codec,
      "(-c:v) video encoder: libx264 (default for .mp4/.mov/.mkv), libx265, libsvtav1, libvpx-vp9 (.webm), ffv1, "
      "mpeg4, ... (those of the linked libavcodec)");
  c->add_option("--crf", a.crf, "(-crf) constant-quality level of the encoder (libx264/libx265 default 18)")
      ->check(CLI::Range(0, 63));
  c->add_option("--preset", a.preset, "(-preset) encoder speed preset (libx264: ultrafast .. veryslow)");
  c->add_option("--video-bitrate", a.bitrate, "(-b:v) video bit rate, e.g. 5M or 800k (instead of -crf)");
  c->add_option("-g,--gop", a.gop, "keyframe interval in frames")->check(CLI::Range(0, 100000));
  c->add_option("--rate", a.rate,
                "(-r) constant output frame rate of a video file (30, 29.97, 60000/1001): frames are "
                "duplicated or dropped by their timestamps");
  c->add_option("--aspect", a.aspect,
                "(-aspect) display aspect ratio of a video file output, e.g. 16:9, 4:3 or 2.39 (tags the pixels' "
                "aspect; default: the input's)");
  c->add_option("--color-primaries", a.color_primaries,
                "(-color_primaries) a video file's primaries tag (bt709, bt2020, smpte170m, ...; default: the "
                "input's); tags only, the samples are not converted");
  c->add_option("--color-trc", a.color_trc, "(-color_trc) its transfer tag (bt709, smpte2084, arib-std-b67, ...)");
  c->add_option("--colorspace", a.colorspace, "(-colorspace) its matrix tag (bt709, bt470bg, bt2020nc, ...)");
  c->add_option("--color-range", a.color_range, "(-color_range) its range tag (tv/limited, pc/full)");
  c->add_option("--codec-params", a.codec_params, "the encoder's own key=value:key=value parameters");
  c->add_option("--encoder-opt", a.encoder_opts,
                "KEY=VALUE: an option of the video encoder, as ffmpeg's -tune, -profile:v, -level, -maxrate, "
                "-bufsize and -bf give it (repeatable)")
      ->allow_extra_args(false);  // one value a use: a positional output after it stays the output
  c->add_option("--metadata", a.metadata,
                "(-metadata) KEY=VALUE: the output file's metadata (title, comment, ...; an empty value removes "
                "the input's; repeatable)")
      ->allow_extra_args(false);
  c->add_flag("--no-audio", a.no_audio, "(-an) leave the input's audio out of a video output (kept by default)");
  c->add_flag("--no-subtitles", a.no_subtitles, "(-sn) leave the input's subtitles out of a video output");
  c->add_flag("--no-data", a.no_data,
              "(-dn) leave the input's data streams (timecode, GPS, ...) out of a video output");
  c->add_option("--audio-codec", a.audio_codec,
                "(-c:a) the audio of a video output: copy, or an encoder (aac, libopus, libvorbis, libmp3lame, flac, "
                "...); default: copied where the container holds it, else re-encoded to its own audio codec");
  c->add_option("--subtitle-codec", a.subtitle_codec,
                "(-c:s) the subtitles of a video output: copy, or a text format (mov_text, webvtt, srt, ass) that "
                "text subtitles are converted into; default: copied where the container holds them, else text "
                "converted to its own text format");
  c->add_option("--audio-bitrate", a.audio_bitrate,
                "(-b:a) bit rate of re-encoded audio, e.g. 128k (default: 64k a channel)");
  c->add_option("--audio-rate", a.audio_rate, "(-ar) sample rate of the audio, e.g. 48000 (re-encodes it)")
      ->check(CLI::Range(1000, 768000));
  c->add_option("--audio-channels", a.audio_channels, "(-ac) channels of the audio, e.g. 2 (re-encodes it)")
      ->check(CLI::Range(1, 64));
  c->add_option("--map", a.map,
                "(-map, repeatable) the input's streams in the output, as ffmpeg: 0 (all), 0:v:1 (the video stream "
                "to filter), 0:a, 0:s:0?, -0:a:1 (leave out); default: the best video stream and every other stream "
                "the container can hold")
      ->allow_extra_args(false);
  c->add_option("--movflags", a.movflags,
                "(-movflags) MP4/MOV muxer flags, e.g. +faststart (a classic MP4 with its index in front); default: "
                "fragmented, a fragment a second, so a full disk or a crash leaves a playable file");
  add_overwrite_flags(c, &a.overwrite, &a.no_overwrite, "output file");
  c->add_flag("--ignore-input-errors", a.ignore_input_errors,
              "a truncated or damaged video input: warn and exit 0 (default: its frames are written, exit 1)");
  add_time_window_options(c, &a.start, &a.duration, &a.to);
  c->add_option("--loglevel", a.loglevel, "(-loglevel, -v LEVEL) messages: quiet, error, warning, info, debug")
      ->check(CLI::IsMember({"quiet", "panic", "fatal", "error", "warning", "info", "verbose", "debug", "trace"}));
  c->add_flag("--lossless", a.lossless,
              "image sequences by vfpipe's PNG encoder (GPU DEFLATE); refuse lossy outputs (.mp4, .avi)");
  c->add_option(
       "--deflate-engine", a.deflate_engine,
       "DEFLATE of PNG and .y4m.gz outputs: auto (the GPU on the CUDA backend, else libdeflate), vfpipe (vfpipe's "
       "encoder on the GPU or its CPU reference: the same bytes on every machine), libdeflate")
      ->check(CLI::IsMember({"auto", "vfpipe", "libdeflate"}))
      ->capture_default_str();
  c->add_option("--compression-level", a.compression_level, "DEFLATE level of PNG and .y4m.gz outputs (1 fast .. 9)")
      ->check(CLI::Range(1, 9))
      ->capture_default_str();
  c->add_option("--hwaccel", a.hwaccel,
                "(-hwaccel) decode video files on the GPU's NVDEC: auto (on the CUDA backend, when the codec and GPU "
                "allow; else the CPU decoder), cuda (NVDEC or an error), none")
      ->check(CLI::IsMember({"auto", "cuda", "none"}))
      ->capture_default_str();
  c->add_option(
       "--hwaccel-output-format", a.hwaccel_output,
       "(-hwaccel_output_format) where NVDEC's frames go: auto (GPU memory when the CUDA backend runs the "
       "chain: no copy to the host and back), cuda (the same, and an error on the CPU backend), host (copied to "
       "host memory)")
      ->check(CLI::IsMember({"auto", "cuda", "host"}))
      ->capture_default_str();
  c->add_option(
       "--codec-threads", a.codec_threads,
       "(-threads) threads of the video decoder and of the encoder (0: libavcodec picks by the cores; batch: the "
       "cores shared among its pipelines)")
      ->check(CLI::Range(0, 1024));
  c->add_option("--fps", a.fps, "frame rate of an image-sequence input, or to request from a camera")
      ->check(CLI::Range(0.0, 10000.0));
  c->add_flag("-q,--quiet", a.quiet, "errors only, no summary");
  c->add_flag("-v,--verbose", a.verbose, "debug messages (chain negotiation, buffers)");
}

namespace {

// What only a single stream has: the display, profiles, statistics lines.
void add_view_options(CLI::App* c, RunArgs& a, bool profile_cmd) {
  if (profile_cmd)
    c->add_option("--prefix", a.profile,
                  "output files: PREFIX.json (profile), PREFIX.trace.json (Perfetto / "
                  "chrome://tracing), PREFIX.html (report with plots)")
        ->capture_default_str();
  else
    c->add_option("--profile", a.profile,
                  "profile the run: PREFIX.json, PREFIX.trace.json, PREFIX.html and a latency table (see "
                  "'vfpipe profile')");
  c->add_option("--display", a.display,
                "show the stream: 'window' (GLFW; the default of 'live') or 'headless' (EGL, offscreen, "
                "PNG screenshots); keys in the footer")
      ->expected(0, 1)
      ->default_str("window")
      ->check(CLI::IsMember({"window", "headless"}));
  c->add_flag("--no-display", a.no_display, "live: no window");
  c->add_option("--view", a.view, "display view: filtered, split, side-by-side, difference")
      ->check(CLI::IsMember({"filtered", "split", "side-by-side", "difference"}))
      ->capture_default_str();
  c->add_option("--vsync", a.vsync, "display: wait for the screen's refresh (on) or not (off)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  c->add_flag("--no-hud", a.no_hud, "display: start with the HUD hidden");
  c->add_flag("--glass-to-glass", a.glass_to_glass,
              "display: flip a patch in the centre black/white; point the camera (-i) at the screen: prints the "
              "delay from each flip to the first captured frame that shows it (docs/profiling.md)");
  c->add_option("--g2g-period", a.g2g_period, "glass-to-glass: milliseconds between flips")->capture_default_str();
  c->add_option("--save-dir", a.save_dir, "display: folder for the S (screenshot) and R (recording) keys")
      ->capture_default_str();
  c->add_option("--screenshot", a.screenshot,
                "display: save PNG screenshots to this path with one %d (the frame number); headless default "
                "vfpipe-display-%06d.png");
  c->add_option("--screenshot-every", a.screenshot_every, "display: a screenshot every N frames (0: the last frame)");
  c->add_option("--profile-frames", a.profile_frames, "per-frame records kept (the newest N; bounded memory)")
      ->capture_default_str();
  c->add_option("--trace-frames", a.trace_frames, "frames in the trace file (after warm-up; 0 = all)")
      ->capture_default_str();
  c->add_flag("--no-progress", a.no_progress, "no progress line");
  c->add_option("--stats-every", a.stats_every,
                "print a statistics line every S seconds: frames, fps, drops, end-to-end latency p50/p99/max, "
                "resident and GPU memory (long and live runs)")
      ->check(CLI::Range(0.1, 86400.0));
}

void add_run_options(CLI::App* c, RunArgs& a, bool input_required, bool profile_cmd = false) {
  c->add_option("-i,--input", a.input, "input: file, '-' (Y4M stdin), synthetic=..., camera=N, pattern")
      ->required(input_required);
  c->add_option("-o,--output", a.output, "output: file.y4m, '-' (Y4M stdout), video file, image pattern, null")
      ->capture_default_str();
  c->add_option("OUTPUT", a.positional_output,
                "the output without -o, as ffmpeg takes it (vfpipe run -i in.mp4 out.mp4)");
  c->add_option("-f,--filters,--vf", a.filters, "filter chain, e.g. \"format=gray,null\"");
  add_common_options(c, a);
  c->add_option("--policy", a.policy, "batch: never drop (back-pressure); live: keep the newest frame")
      ->check(CLI::IsMember({"batch", "live"}));
  c->add_option("--report", a.report, "write a JSON timing report to FILE");
  c->add_flag("--report-frames", a.report_frames, "include every frame's timings in the report");
  c->add_option("--warmup", a.warmup, "leave the first N frames out of the statistics")->check(CLI::Range(0, 1000000));
  c->add_option("--size", a.size, "capture size to request from a camera, WxH");
  auto* re = c->add_flag("--realtime", a.realtime,
                         "(-re) read the input at its own frame rate, as a player does (the default of 'live' for "
                         "files, pipes, image sequences and the synthetic source)");
  c->add_flag("--no-realtime", a.no_realtime, "read the input as fast as the chain takes it (live too)")->excludes(re);
  c->add_option("--sendcmd", a.sendcmd,
                "change filter options at given frames; FILE lines: 'FRAME FILTER key=value:...' "
                "(FILTER: a name or #N), e.g. '30 conv kernel=sharpen'");
  c->add_option("--progress-file", a.progress_file,
                "(-progress) machine-readable progress: key=value blocks (frame, fps, drop_frames, out_time_us, speed, "
                "progress=continue|end) every 0.5 s to FILE, or '-' for stderr");
  add_view_options(c, a, profile_cmd);
}

}  // namespace

Backend choose_backend(const std::string& device, const std::vector<std::unique_ptr<Stage>>& stages) {
  if (device == "cpu") return Backend::CPU;
  std::string missing;
  for (const auto& s : stages)
    if (!s->has_cuda()) missing += (missing.empty() ? "" : ", ") + s->name();
#if VFPIPE_HAVE_CUDA
  const cuda::DeviceInfo& gpu = cuda::probe();
  if (device == "cuda") {
    if (!gpu.usable) throw Error(ErrorKind::Gpu, "--device cuda: no usable GPU (" + gpu.reason + ")");
    if (!missing.empty()) throw Error(ErrorKind::Usage, "--device cuda: no CUDA implementation for: " + missing);
    return Backend::CUDA;
  }
  if (!gpu.usable) {
    log::warn("no usable CUDA GPU (%s); running on the CPU", gpu.reason.c_str());
    return Backend::CPU;
  }
  if (!missing.empty()) {
    log::warn("no CUDA implementation for %s; running the chain on the CPU", missing.c_str());
    return Backend::CPU;
  }
  return Backend::CUDA;
#else
  if (device == "cuda") throw Error(ErrorKind::Gpu, "--device cuda: this build of vfpipe has no CUDA support");
  log::warn("this build has no CUDA support; running on the CPU");
  return Backend::CPU;
#endif
}

namespace {

// The profile's files: PREFIX + each of these (write_profile writes them in this order).
constexpr std::array<const char*, 3> kProfileFiles = {".json", ".trace.json", ".html"};

// The profile's table on stderr and its three files.
void write_profile(const RunReport& r, const RunArgs& a, bool quiet) {
  const ProfileSummary p = summarize_profile(r);
  if (!quiet) std::fputs(profile_text(r, p).c_str(), stderr);
  write_file(a.profile + kProfileFiles[0], profile_json(r, p, true).dump(1) + "\n", "profile");
  write_file(a.profile + kProfileFiles[1], chrome_trace_json(r, static_cast<size_t>(a.trace_frames)) + "\n", "trace");
  write_file(a.profile + kProfileFiles[2], html_report(r, p), "report");
  if (!quiet)
    std::fprintf(stderr, "  wrote %s.json, %s.trace.json (open in ui.perfetto.dev), %s.html\n", a.profile.c_str(),
                 a.profile.c_str(), a.profile.c_str());
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorKind::Input, "cannot open '" + path + "'");
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw Error(ErrorKind::Input, "'" + path + "' is not JSON: " + e.what());
  }
}

int compare_command(const std::vector<std::string>& files, double threshold) {
  const auto a = read_json(files.at(0)), b = read_json(files.at(1));
  for (const auto* j : {&a, &b})
    if (!j->contains("profile") && !j->contains("steps_ms"))
      throw Error(ErrorKind::Input, "not a vfpipe profile or report (no 'profile' or 'steps_ms')");
  bool regressed = false;
  std::printf("A: %s\nB: %s\n%s", files[0].c_str(), files[1].c_str(),
              compare_profiles(a, b, threshold, &regressed).c_str());
  if (regressed) std::printf("slower: some p50 of B is more than %.1f%% above A's\n", threshold);
  return regressed ? 1 : 0;
}

// "5M", "800k", "2500000": bits per second.
int64_t parse_bitrate(const std::string& s, const char* option) {
  if (s.empty()) return 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  const std::string unit = end;
  const double mul = unit.empty() ? 1 : unit == "k" || unit == "K" ? 1e3 : unit == "M" ? 1e6 : unit == "G" ? 1e9 : -1;
  if (end == s.c_str() || mul < 0 || !(v > 0) || v * mul > 1e12)
    throw Error(ErrorKind::Usage,
                std::string(option) + ": expected a bit rate such as 5M, 800k or 2500000, got '" + s + "'");
  return static_cast<int64_t>(v * mul);
}

}  // namespace

// The output, checked against the input: a single image must be the whole run.
std::unique_ptr<Sink> open_output(const RunArgs& a, Backend backend, const Source& src) {
  SinkOptions ko;
  ko.codec = a.codec;
  ko.lossless = a.lossless;
  ko.compression_level = a.compression_level;
  ko.gpu = backend == Backend::CUDA && a.deflate_engine != "libdeflate";
  ko.deflate_reference = a.deflate_engine == "vfpipe";
  ko.video.crf = a.crf;
  ko.video.preset = a.preset;
  ko.video.bitrate = parse_bitrate(a.bitrate, "-b:v");
  ko.video.gop = a.gop;
  ko.video.bits = forced_bits(a);
  ko.video.input_bits = src.sample_bits();
  ko.video.codec_params = a.codec_params;
  const auto pairs = [](const std::vector<std::string>& v, const char* option) {
    std::vector<std::pair<std::string, std::string>> out;
    for (const std::string& kv : v) {
      const size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0)
        throw Error(ErrorKind::Usage, std::string(option) + ": expected KEY=VALUE, got '" + kv + "'");
      out.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
    }
    return out;
  };
  ko.video.encoder_options = pairs(a.encoder_opts, "--encoder-opt");
  ko.video.metadata = pairs(a.metadata, "-metadata");
  ko.video.audio = !a.no_audio;
  ko.video.subtitles = !a.no_subtitles;
  ko.video.data = !a.no_data;
  ko.video.audio_codec = a.audio_codec;
  ko.video.subtitle_codec = a.subtitle_codec;
  ko.video.audio_bitrate = parse_bitrate(a.audio_bitrate, "-b:a");
  ko.video.audio_rate = a.audio_rate;
  ko.video.audio_channels = a.audio_channels;
  ko.video.threads = a.codec_threads;
  ko.video.movflags = a.movflags;
  if (!a.aspect.empty()) ko.video.aspect = parse_display_aspect(a.aspect);
  ko.video.color_primaries = a.color_primaries;
  ko.video.color_trc = a.color_trc;
  ko.video.colorspace = a.colorspace;
  ko.video.color_range = a.color_range;
  if (!a.rate.empty()) ko.video.rate = parse_output_rate(a.rate);
  ko.overwrite = overwrite_rule(a.overwrite, a.no_overwrite);
#if VFPIPE_HAVE_LIBAV
  ko.video.input = libav_input_of(src);
#endif
  report_streams_left_out(src, a.output, ko.video);
  std::unique_ptr<Sink> sink = open_sink(a.output, ko);
  // A single image: the run must stop in time (-n, or an input known to be short enough).
  if (const int64_t max = sink->max_frames(); max > 0) {
    const int64_t n = src.frame_count();
    const bool fits = a.frames >= 0 ? a.frames <= max : (n > 0 && n <= max);
    if (!fits)
      throw Error(ErrorKind::Usage,
                  log::format("'%s' holds %lld image; the input has %s frames: add -n %lld (ffmpeg: -frames:v 1), "
                              "or write every frame with a pattern such as frames/%%06d.png",
                              a.output.c_str(), static_cast<long long>(max), n > 0 ? std::to_string(n).c_str() : "more",
                              static_cast<long long>(max)));
  }
  return sink;
}

namespace {

#if VFPIPE_HAVE_GL
// Wraps `sink` in the display (--display, and `live` by default); the display sink or null.
DisplaySink* add_display(const RunArgs& a, bool live, Backend backend, std::unique_ptr<Sink>& sink) {
  if (a.display.empty()) return nullptr;
  DisplaySinkOptions d;
  d.display.headless = a.display == "headless";
  d.display.vsync = a.vsync == "on";
  d.display.hud = !a.no_hud;
  parse_display_view(a.view, &d.display.view);
  d.display.title = "vfpipe: " + (a.filters.empty() ? std::string("(no filters)") : a.filters);
  d.screenshot = a.screenshot.empty() && d.display.headless ? "vfpipe-display-%06d.png" : a.screenshot;
  d.screenshot_every = a.screenshot_every;
  d.filters = a.filters;
  // Live: show the newest frame, skip those it cannot keep up with (no added latency);
  // batch: show every frame.
  d.drop_when_behind = live || a.policy == "live";
  d.display.cuda_interop = backend == Backend::CUDA;
  d.glass_to_glass = a.glass_to_glass;
  d.g2g_period_ms = a.g2g_period;
  d.save_dir = a.save_dir;
  auto ds = std::make_unique<DisplaySink>(d, std::move(sink), nullptr);
  DisplaySink* shown = ds.get();
  sink = std::move(ds);
  return shown;
}

void print_display_summary(const RunArgs& a, const DisplaySink& d) {
  if (!a.quiet && d.shown() > 0)
    std::fprintf(
        stderr,
        "  display: %lld frames shown (%lld straight from CUDA), %lld skipped to keep up; per frame %.3f ms on "
        "the host (upload + draw + present), %.3f ms on the GPU (upload %.3f + draw %.3f); %s\n",
        static_cast<long long>(d.shown()), static_cast<long long>(d.shown_from_device()),
        static_cast<long long>(d.skipped()), d.mean_show_ms(), d.mean_gpu_ms(), d.mean_gpu_upload_ms(),
        d.mean_gpu_draw_ms(), d.renderer().c_str());
  if (a.glass_to_glass) {
    const G2GResult& g = d.glass_to_glass();
    std::fprintf(stderr,
                 "  glass-to-glass: %zu flips measured, %d not seen by the camera; delay ms: min %.1f, p50 %.1f, mean "
                 "%.1f, p95 %.1f, max %.1f\n",
                 g.delays_ms.size(), g.missed, g.ms.min, g.ms.p50, g.ms.mean, g.ms.p95, g.ms.max);
  }
}
#endif

}  // namespace

int default_depth(bool batch, Backend backend, const std::vector<const Stage*>& stages) {
  // kMost: the mmp stage on 8 GPUs (8 frames a GPU); kBanks: the GPU's constant-memory banks.
  constexpr int kDefault = 3, kMost = 64, kBanks = 16;
  if (!batch || backend != Backend::CUDA) return kDefault;
  int wish = kDefault, banks = 0;
  for (const Stage* s : stages) {
    wish = std::max(wish, std::min(kMost, s->frames_in_flight()));
    banks += s->constant_banks_per_slot();
  }
  // Conv stages hold one of the GPU's 16 constant-memory banks per frame in flight: the
  // wish yields to them (an explicit --depth fails with the banks' message instead).
  if (banks > 0) wish = std::max(kDefault, std::min(wish, kBanks / banks));
  return wish;
}

std::vector<const Stage*> stages_of(const Chain& chain) {
  std::vector<const Stage*> v;
  for (size_t i = 0; i < chain.size(); ++i) v.push_back(chain.step(i).stage.get());
  return v;
}

std::vector<const Stage*> stages_of(const std::vector<std::unique_ptr<Stage>>& stages) {
  std::vector<const Stage*> v;
  for (const auto& s : stages) v.push_back(s.get());
  return v;
}

EngineConfig engine_config(const RunArgs& a, bool live, Backend backend, const Source& src, const Chain& chain) {
  EngineConfig cfg;
  cfg.backend = backend;
  std::string policy = a.policy.empty() ? (live || src.is_live() ? "live" : "batch") : a.policy;
  cfg.policy = policy == "live" ? Policy::Live : Policy::Batch;
  cfg.depth = a.depth > 0 ? a.depth : default_depth(cfg.policy == Policy::Batch, backend, stages_of(chain));
  cfg.completion = a.completion == "hostfunc" ? Completion::HostFunc : Completion::Event;
  cfg.queue = a.queue;
  cfg.max_frames = a.frames;
  // A camera or a paced synthetic source keeps its own time; anything else is read as fast
  // as the chain takes it, unless -re or `live` (a window plays a file at its rate).
  if (a.realtime || (!a.no_realtime && live && !src.is_live())) {
    const double fps = src.spec().fps.value();
    if (fps > 0) {
      cfg.pace_fps = fps;
      if (!a.realtime)
        log::info("playing %s at its %.4g frames/s (--no-realtime: as fast as the chain goes)", a.input.c_str(), fps);
    } else {
      log::warn("-re: the input has no frame rate; it is read as fast as the chain goes");
    }
  }
  cfg.warmup = a.warmup;
  cfg.max_records = a.profile_frames;
  cfg.stop = &stop_flag();
  return cfg;
}

void apply_log_options(RunArgs& a) {
  if (a.quiet) log::set_level(log::Level::Error);
  if (a.verbose) log::set_level(log::Level::Debug);
  if (!a.loglevel.empty()) {  // ffmpeg's names
    const std::string& l = a.loglevel;
    log::set_level(l == "quiet" || l == "panic" || l == "fatal" || l == "error" ? log::Level::Error
                   : l == "warning"                                             ? log::Level::Warn
                   : l == "info"                                                ? log::Level::Info
                                                                                : log::Level::Debug);
    if (l == "quiet" || l == "panic" || l == "fatal") a.quiet = true;  // no summary either
    if (l == "error") a.no_progress = true;
  }
}

namespace {
PixelFormat parse_forced(const RunArgs& a, int* bits) {
  PixelFormat f;
  if (!parse_pix_fmt(a.pix_fmt, &f, bits))
    throw Error(ErrorKind::Usage, "--pix-fmt: unsupported pixel format '" + a.pix_fmt +
                                      "' (supported: " + pix_fmt_list() +
                                      "; for a video file also yuv420p10le, yuv444p12le, gray10le, ...)");
  return f;
}
}  // namespace

std::optional<PixelFormat> forced_format(const RunArgs& a) {
  if (a.pix_fmt.empty()) return std::nullopt;
  int bits = 0;
  return parse_forced(a, &bits);
}

int forced_bits(const RunArgs& a) {
  if (a.pix_fmt.empty()) return 0;
  int bits = 0;
  parse_forced(a, &bits);
  return bits == 8 || bits == 16 ? 0 : bits;
}

SourceOptions source_options(const RunArgs& a, Backend backend) {
  SourceOptions so;
  so.pinned = backend == Backend::CUDA;
  so.fps = a.fps;
  so.start = a.start;
  so.duration = window_duration(a.start, a.duration, a.to);
  so.ignore_input_errors = a.ignore_input_errors;
  so.hwaccel = a.hwaccel;
  so.hwaccel_output = a.hwaccel_output;
  so.codec_threads = a.codec_threads;
  for (const std::string& m : a.map) so.map.push_back(parse_stream_map(m));
  return so;
}

namespace {

// The run's summary, reports and profile; the exit status (rethrows the run's error).
int finish_run(RunResult& res, const RunArgs& a, const Chain& chain, const std::vector<Command>& commands) {
  res.report.filters = a.filters;
  // A profiled run prints the profile's fuller table instead of the summary's.
  if (!a.quiet && res.report.frames_out > 0 && a.profile.empty()) std::fputs(res.report.text().c_str(), stderr);
  if (!a.quiet)
    for (size_t i = 0; i < chain.size(); ++i)
      if (const std::string r = chain.step(i).stage->report(); !r.empty()) std::fprintf(stderr, "  %s\n", r.c_str());
  // A command whose frame never came is worth a warning when the input simply ended.
  const bool missed = std::any_of(commands.begin(), commands.end(), [](const Command& c) { return !c.applied; });
  if (!res.error && !res.report.interrupted && missed)
    log::warn("%s", commands_summary(commands).c_str());
  else if (!a.quiet && !commands.empty())
    std::fprintf(stderr, "  %s\n", commands_summary(commands).c_str());
  if (!a.report.empty()) write_file(a.report, res.report.json(a.report_frames) + "\n", "report");
  if (!a.profile.empty() && res.report.frames_out > 0) write_profile(res.report, a, a.quiet);
  if (res.error) std::rethrow_exception(res.error);
  if (res.report.frames_out == 0 && !res.report.interrupted) log::warn("no frames were processed");
  if (int sig = stop_flag().load()) {
    log::info("stopped by signal %d after %lld frames; output closed cleanly", sig,
              static_cast<long long>(res.report.frames_out));
    return 128 + sig;
  }
  return 0;
}

int run_command(RunArgs& a, bool live) {
  apply_log_options(a);
  install_signal_handlers();

  // Everything the user typed is validated before any input or output is opened.
  auto stages = build_stages(a.filters);
  check_output_is_not_input(a.input, a.output);
  // The run's reports, written over whatever is there (as ffmpeg's -report and -progress),
  // but never over the input.
  for (const std::string& f : {a.report, a.progress_file}) check_output_is_not_input(a.input, f);
  if (!a.profile.empty())
    for (const char* ext : kProfileFiles) check_output_is_not_input(a.input, a.profile + ext);
  const Overwrite rule = overwrite_rule(a.overwrite, a.no_overwrite);
  for (const auto& st : stages)
    for (const std::string& f : st->output_files()) {
      check_output_is_not_input(a.input, f);
      if (same_file(f, a.output))
        throw Error(ErrorKind::Usage, "'" + f + "' is both the output and the file " + st->name() + " writes");
      check_overwrite(f, rule);
    }
  const std::optional<PixelFormat> forced = forced_format(a);
  const Backend backend = choose_backend(a.device, stages);
  SourceOptions so = source_options(a, backend);
  if (!a.size.empty() && std::sscanf(a.size.c_str(), "%dx%d", &so.width, &so.height) != 2)
    throw Error(ErrorKind::Usage, "--size: expected WxH, got '" + a.size + "'");
  auto src = open_source(a.input, so);
  std::unique_ptr<Sink> sink = open_output(a, backend, *src);
  if (live && a.display.empty() && !a.no_display) a.display = "window";
  if (a.glass_to_glass && a.display.empty())
    throw Error(ErrorKind::Usage, "--glass-to-glass needs --display (the screen shows the pattern the camera films)");
#if VFPIPE_HAVE_GL
  DisplaySink* display_sink = add_display(a, live, backend, sink);
#if VFPIPE_HAVE_LIBAV
  // The window draws samples as SDR: PQ or HLG video looks washed out there, unlike in the
  // files vfpipe writes (which keep its transfer).
  if (const std::shared_ptr<LibavInput> in = libav_input_of(*src); display_sink && in)
    if (const std::string t = libav_hdr_transfer(*in); !t.empty())
      log::warn("the input is HDR video (%s transfer): the window shows it as SDR, without tone mapping", t.c_str());
#endif
#else
  if (a.glass_to_glass) throw Error(ErrorKind::Usage, "--glass-to-glass needs the display, which this build lacks");
  if (!a.display.empty())
    throw Error(ErrorKind::Usage, "--display: this build of vfpipe has no display (GLFW, GLEW and EGL were not found)");
#endif

  Chain chain = Chain::build(std::move(stages), src->spec(), sink->accepted_formats(), forced);
  log::debug("chain: %s", chain.describe().c_str());
  std::vector<Command> commands;
  if (!a.sendcmd.empty()) {
    commands = load_commands(a.sendcmd);
    validate_commands(commands, chain);
  }
  sink->open(chain.output());

  EngineConfig cfg = engine_config(a, live, backend, *src, chain);
  int64_t total = src->frame_count();
  if (a.frames >= 0 && (total < 0 || a.frames < total)) total = a.frames;
  Progress progress(!a.no_progress && !a.quiet && a.stats_every == 0, total, src->spec().fps.value());
  std::unique_ptr<ProgressFile> progress_file;
  if (!a.progress_file.empty())
    progress_file = std::make_unique<ProgressFile>(a.progress_file, src->spec().fps.value());
  cfg.progress = [&](int64_t done, int64_t dropped) {
    progress.update(done, dropped);
    if (progress_file) progress_file->update(done, dropped);
  };
  std::unique_ptr<PeriodicStats> stats;
  if (a.stats_every > 0) {
    std::function<size_t()> gpu_memory;
#if VFPIPE_HAVE_CUDA
    if (backend == Backend::CUDA) gpu_memory = [] { return cuda::device_memory_used(); };
#endif
    stats = std::make_unique<PeriodicStats>(a.stats_every, gpu_memory);
    cfg.on_frame = [&](const FrameRecord& rec, int64_t dropped) { stats->frame(rec, dropped); };
  }
  // Live changes between frames: --sendcmd's commands and the display's keys.
  std::unique_ptr<LiveControls> controls;
#if VFPIPE_HAVE_GL
  if (display_sink) {
    display_sink->set_source_spec(chain.input());
    controls = std::make_unique<LiveControls>(chain);
    display_sink->set_controls(controls.get());
  }
#endif
  // A key pressed between the two calls waits for the next frame: the engine settled the
  // chain only for what change_due saw.
  bool controls_due = false;
  if (!commands.empty() || controls) {
    cfg.change_due = [&](int64_t index) {
      controls_due = controls && controls->pending();
      return controls_due || commands_due(commands, index);
    };
    cfg.before_frame = [&](int64_t index, Chain& c) {
      if (!commands.empty()) apply_commands(commands, index, c);
      if (controls_due) controls->apply(c);
    };
  }

  log::info("%s -> [%s] -> %s on %s", src->describe().c_str(), chain.describe().c_str(), sink->describe().c_str(),
            backend_name(backend));
  RunResult res = run_pipeline(*src, chain, *sink, cfg);
  progress.finish();
  if (progress_file) progress_file->finish(res.report.frames_out, res.report.dropped);
  if (stats) stats->finish(res.report.dropped);
#if VFPIPE_HAVE_GL
  if (display_sink) print_display_summary(a, *display_sink);
#endif
  return finish_run(res, a, chain, commands);
}

}  // namespace

const char* run_examples() { return kExamples; }

namespace {
// The output given as ffmpeg takes it (the last argument, without -o) in place of -o's.
void take_positional_output(RunArgs& a, const CLI::App* c) {
  if (a.positional_output.empty()) return;
  if (c->count("--output") > 0)
    throw Error(ErrorKind::Usage, "two outputs, -o " + a.output + " and " + a.positional_output + ": vfpipe " +
                                      c->get_name() + " writes one");
  a.output = a.positional_output;
}
}  // namespace

void add_run_commands(CLI::App& app, Subcommands& out) {
  auto run_args = std::make_shared<RunArgs>(), live_args = std::make_shared<RunArgs>();
  auto* run = app.add_subcommand("run", "process a file, pipe or generated stream (batch: nothing is dropped)");
  add_run_options(run, *run_args, false);
  run->footer(kExamples);
  auto* live = app.add_subcommand(
      "live", "show a camera, or a file played at its rate, in a window; the newest frame wins, drops are counted");
  add_run_options(live, *live_args, false);  // camera=0 when no -i
  live->footer(kLiveHelp);
  auto prof_args = std::make_shared<RunArgs>();
  prof_args->profile = "vfpipe-profile";
  prof_args->warmup = 10;
  prof_args->output = "null";
  auto compare = std::make_shared<std::vector<std::string>>();
  auto threshold = std::make_shared<double>(5);
  auto* profile = app.add_subcommand("profile", "latency profile of a run: table, JSON, Perfetto trace, HTML plots");
  add_run_options(profile, *prof_args, false, true);
  profile->add_option("--compare", *compare, "compare two profiles (A.json B.json) instead of running")->expected(2);
  profile->add_option("--fail-above", *threshold, "with --compare: exit 1 if a p50 of B is more than PCT% above A")
      ->capture_default_str();
  profile->footer(kProfileHelp);
  out.push_back({run, [run_args, run] {
                   take_positional_output(*run_args, run);
                   return run_command(*run_args, false);
                 }});
  out.push_back({live, [live_args, live] {
                   take_positional_output(*live_args, live);
                   if (live_args->input.empty()) live_args->input = "camera=0";
                   return run_command(*live_args, true);
                 }});
  out.push_back({profile, [prof_args, compare, threshold, profile] {
                   if (!compare->empty()) return compare_command(*compare, *threshold);
                   take_positional_output(*prof_args, profile);
                   if (prof_args->input.empty())
                     throw Error(ErrorKind::Usage, "profile: --input is required (or --compare A B)");
                   return run_command(*prof_args, false);
                 }});
}

}  // namespace vfp
