// vfpipe: the command-line front end. Each subcommand lives in its own file (cli.hpp);
// this one builds the app, parses, and turns errors into one line and an exit status.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "apps/vfpipe/cli.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/parallel.hpp"

namespace vfp {

void add_overwrite_flags(CLI::App* cmd, bool* overwrite, bool* no_overwrite, const std::string& what) {
  cmd->add_flag("-y,--overwrite", *overwrite, "overwrite an existing " + what);
  cmd->add_flag("--no-overwrite", *no_overwrite, "never overwrite an existing " + what + " (ffmpeg's -n)");
  // As ffmpeg, which stops when given both.
  cmd->parse_complete_callback([overwrite, no_overwrite] {
    if (*overwrite && *no_overwrite) throw CLI::ValidationError("-y and -n (--no-overwrite) contradict each other");
  });
}

void add_time_window_options(CLI::App* cmd, double* start, double* duration, double* to) {
  cmd->add_option("--start", *start,
                  "(-ss) start this many seconds into the input (video files seek by timestamps; Y4M, images and "
                  "synthetic count frames at their rate)")
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("-t,--duration", *duration, "process this many seconds of the input")->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--to", *to, "(-to) stop at this time of the input, in seconds (-t wins if both)")
      ->check(CLI::Range(0.0, 1e9));
}

const char* ffmpeg_encoder_option(const std::string& name) {
  static const std::pair<const char*, const char*> options[] = {{"tune", "tune"},
                                                                {"tune:v", "tune"},
                                                                {"profile:v", "profile"},
                                                                {"vprofile", "profile"},
                                                                {"level", "level"},
                                                                {"level:v", "level"},
                                                                {"maxrate", "maxrate"},
                                                                {"maxrate:v", "maxrate"},
                                                                {"bufsize", "bufsize"},
                                                                {"bufsize:v", "bufsize"},
                                                                {"bf", "bf"}};
  for (const auto& [ffmpeg, key] : options)
    if (name == ffmpeg) return key;
  return nullptr;
}

Rational parse_display_aspect(const std::string& text) {
  std::string ratio = text;
  std::replace(ratio.begin(), ratio.end(), ':', '/');
  Rational r;
  if (!parse_frame_rate(ratio, &r))
    throw Error(ErrorKind::Usage,
                "-aspect: expected a display aspect ratio such as 16:9, 4:3 or 2.39, got '" + text + "'");
  return r;
}

Rational parse_output_rate(const std::string& text) {
  Rational r;
  if (!parse_frame_rate(text, &r))
    throw Error(ErrorKind::Usage, "-r: expected a frame rate such as 30, 29.97 or 60000/1001, got '" + text + "'");
  return r;
}

double window_duration(double start, double duration, double to) {
  // An empty window would write an output without a frame (an MP4 even without its video
  // track): refused, as the user surely meant something else.
  if (duration == 0) throw Error(ErrorKind::Usage, "-t 0: an empty time window leaves nothing to filter");
  if (duration < 0 && to >= 0 && to <= start)
    throw Error(ErrorKind::Usage,
                log::format("-to %g: not after the start (-ss %g), so nothing is left to filter", to, start));
  return duration >= 0 ? duration : to >= 0 ? to - start : -1;
}

void write_file(const std::string& path, const std::string& text, const char* what) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) throw Error(ErrorKind::Output, log::format("cannot write %s '%s'", what, path.c_str()));
}

namespace {

int exit_code(ErrorKind k) { return k == ErrorKind::Usage ? 2 : 1; }

// FFmpeg's spellings of the video options (single dash, colons) as vfpipe's long options.
// `-n` is ffmpeg's "never overwrite" unless a frame count follows it (vfpipe's -n N).
std::vector<std::string> ffmpeg_spellings(int argc, char** argv) {
  static const std::pair<const char*, const char*> names[] = {{"-c:v", "--codec"},
                                                              {"-vcodec", "--codec"},
                                                              {"-codec:v", "--codec"},
                                                              {"-crf", "--crf"},
                                                              {"-preset", "--preset"},
                                                              {"-b:v", "--video-bitrate"},
                                                              {"-x264-params", "--codec-params"},
                                                              {"-x265-params", "--codec-params"},
                                                              {"-svtav1-params", "--codec-params"},
                                                              {"-an", "--no-audio"},
                                                              {"-re", "--realtime"},
                                                              {"-c:a", "--audio-codec"},
                                                              {"-acodec", "--audio-codec"},
                                                              {"-codec:a", "--audio-codec"},
                                                              {"-b:a", "--audio-bitrate"},
                                                              {"-c:s", "--subtitle-codec"},
                                                              {"-scodec", "--subtitle-codec"},
                                                              {"-codec:s", "--subtitle-codec"},
                                                              {"-ar", "--audio-rate"},
                                                              {"-ac", "--audio-channels"},
                                                              {"-ss", "--start"},
                                                              {"-frames:v", "--frames"},
                                                              {"-vframes", "--frames"},
                                                              {"-sn", "--no-subtitles"},
                                                              {"-dn", "--no-data"},
                                                              {"-pix_fmt", "--pix-fmt"},
                                                              {"-color_primaries", "--color-primaries"},
                                                              {"-color_trc", "--color-trc"},
                                                              {"-colorspace", "--colorspace"},
                                                              {"-color_range", "--color-range"},
                                                              {"-to", "--to"},
                                                              {"-loglevel", "--loglevel"},
                                                              {"-progress", "--progress-file"},
                                                              {"-vf", "--vf"},
                                                              {"-filter:v", "--vf"},
                                                              {"-threads", "--codec-threads"},
                                                              {"-r", "--rate"},
                                                              {"-hwaccel", "--hwaccel"},
                                                              {"-hwaccel_output_format", "--hwaccel-output-format"},
                                                              {"-map", "--map"},
                                                              {"-movflags", "--movflags"},
                                                              {"-aspect", "--aspect"},
                                                              {"-framerate", "--fps"},
                                                              {"-filter_complex", "--vf"},
                                                              {"-lavfi", "--vf"},
                                                              {"-metadata", "--metadata"}};
  std::vector<std::string> args(argv, argv + argc);
  // Habits with nothing to do here (vfpipe prints no banner, reads no keys from stdin and
  // shows its progress anyway);
  // CLI11 would read -hide_banner as the short options -h -i -d ...
  args.erase(
      std::remove_if(args.begin() + 1, args.end(),
                     [](const std::string& a) { return a == "-hide_banner" || a == "-nostdin" || a == "-stats"; }),
      args.end());
  for (size_t i = 1; i < args.size(); ++i) {
    for (const auto& [from, to] : names)
      if (args[i] == from) args[i] = to;
    // ffmpeg's options of the video encoder: --encoder-opt KEY=VALUE (CLI11 alone would read
    // -tune as -t une).
    if (const char* key = args[i].size() > 1 && args[i][0] == '-' ? ffmpeg_encoder_option(args[i].substr(1)) : nullptr;
        key && i + 1 < args.size()) {
      args[i] = "--encoder-opt";
      args[i + 1] = std::string(key) + "=" + args[i + 1];
    }
    // ffmpeg's -c applies to every stream; here only the video is encoded, so it is -c:v,
    // and -c copy (every stream copied) has no meaning.
    if ((args[i] == "-c" || args[i] == "-codec") && i + 1 < args.size()) {
      if (args[i + 1] == "copy")
        throw Error(ErrorKind::Usage, args[i] +
                                          " copy: vfpipe encodes the video it filters, and copies the other streams "
                                          "by default (-c:a copy and -c:s copy insist on it); to copy every stream "
                                          "use ffmpeg -c copy");
      args[i] = "--codec";
    }
    // ffmpeg options whose meaning vfpipe does not have: said plainly, not as CLI11's reading
    // of them as short options (-vn as -v -n, -s as nothing).
    if (args[i] == "-loop")
      throw Error(ErrorKind::Usage,
                  "-loop: vfpipe reads its input once; for a still image as a video, ffmpeg -loop 1 -i IMAGE -t "
                  "SECONDS -f yuv4mpegpipe - | vfpipe run -i - ...");
    if (args[i] == "-vn")
      throw Error(ErrorKind::Usage,
                  "-vn: vfpipe writes the video it filters; for the other streams alone use ffmpeg -vn");
    if (args[i] == "-s" || args[i] == "-video_size")
      throw Error(ErrorKind::Usage, args[i] +
                                        ": vfpipe does not scale frames; --size WxH asks a camera for a capture "
                                        "size, and the synthetic source takes size=WxH");
    static const char* levels[] = {"quiet", "panic", "fatal", "error", "warning", "info", "verbose", "debug", "trace"};
    if (args[i] == "-v" && i + 1 < args.size())  // ffmpeg's -v LEVEL; vfpipe's -v alone: verbose
      for (const char* l : levels)
        if (args[i + 1] == l) args[i] = "--loglevel";
    if (args[i] == "-n") {
      const bool count = i + 1 < args.size() && !args[i + 1].empty() &&
                         args[i + 1].find_first_not_of("0123456789") == std::string::npos;
      if (!count) args[i] = "--no-overwrite";
    }
  }
  // One input a run: a second -i is said plainly (CLI11's "At Most 1 required").
  if (args.size() > 1 && (args[1] == "run" || args[1] == "live" || args[1] == "profile")) {
    const auto inputs = std::count_if(args.begin() + 2, args.end(), [](const std::string& a) {
      return a == "-i" || a == "--input" || a.rfind("--input=", 0) == 0;
    });
    if (inputs > 1)
      throw Error(ErrorKind::Usage,
                  log::format("-i given %d times: vfpipe %s filters one input (vfpipe batch takes many "
                              "files, each to its own output)",
                              static_cast<int>(inputs), args[1].c_str()));
  }
  return args;
}

// CLI11's range checks let NaN through (every comparison with it is false) and some options
// have no range: every floating-point option given must be a finite number.
void reject_non_finite(const CLI::App& app) {
  for (const CLI::Option* o : app.get_options()) {
    if (o->count() == 0 || o->get_type_name().rfind("FLOAT", 0) != 0) continue;  // "FLOAT" or "FLOAT in [..]"
    for (const std::string& v : o->results()) {
      char* end = nullptr;
      const double d = std::strtod(v.c_str(), &end);
      if (end != v.c_str() && !std::isfinite(d))
        throw Error(ErrorKind::Usage, o->get_name() + ": '" + v + "' is not a finite number");
    }
  }
  for (const CLI::App* sub : app.get_subcommands()) reject_non_finite(*sub);
}

}  // namespace
}  // namespace vfp

int main(int argc, char** argv) {
  using namespace vfp;
  // Before any CUDA call: CUDA maps all streams onto 8 hardware queues by default, so work on
  // more streams than that (the MMP search keeps about 3 per tile in flight) waits behind
  // unrelated launches. 32 is the most; a value the user set is kept. Only for runs that
  // name MMP (`vfpipe mmp`, an mmp filter): the queues are made with every context, and 32
  // of them make each GPU's start 0.3-0.5 s slower (docs/perf.md, multi-GPU batch).
  bool names_mmp = false;
  for (int i = 1; i < argc; ++i) names_mmp = names_mmp || std::strstr(argv[i], "mmp") != nullptr;
  if (names_mmp) setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  CLI::App app{
      "vfpipe: real-time video filtering on NVIDIA GPUs, with CPU fallback.\n"
      "Frames flow source -> GPU stages (pinned double-buffered copies, several CUDA "
      "streams) -> sink."};
  app.footer(run_examples());
  app.require_subcommand(1);
  // Parse errors read like every other error: one "vfpipe: error:" line, then the hint.
  app.failure_message([](const CLI::App* a, const CLI::Error& e) {
    std::string cmd = "vfpipe";
    for (const CLI::App* sub = a; sub && !sub->get_subcommands().empty();) {
      sub = sub->get_subcommands().front();
      cmd += " " + sub->get_name();
    }
    return std::string("vfpipe: error: ") + e.what() + "\nRun '" + cmd + " --help' for more information.\n";
  });
  app.set_version_flag("--version", VFPIPE_VERSION);
  // Global, before or after the subcommand: the size of the process-wide CPU pool.
  int threads = 0;
  app.add_option("--threads", threads,
                 "CPU threads for the CPU stages, the synthetic source and the codecs (0 = every core)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  app.fallthrough();
  // Options from a TOML file: `[batch]` holds batch's (what `vfpipe batch --slurm` writes for
  // its array tasks); a top-level `threads=N` is --threads.
  app.set_config("--config", "", "read options from a TOML file (see 'vfpipe batch --help')");

  Subcommands commands;
  add_run_commands(app, commands);
  add_batch_command(app, commands);
  add_mmp_commands(app, commands);
  add_compress_command(app, commands);
  add_filters_commands(app, commands);

  try {
    std::vector<std::string> args = ffmpeg_spellings(argc, argv);
    std::reverse(args.begin(), args.end());
    args.pop_back();  // the program name
    app.parse(args);
    reject_non_finite(app);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "vfpipe: error: %s\n", e.what());
    return 2;
  }
  try {
    set_cpu_threads(threads);
    for (const Subcommand& c : commands)
      if (c.cli->parsed()) return c.run();
    return 2;  // unreachable: CLI11 requires a subcommand
  } catch (const ParseError& e) {
    std::fprintf(stderr, "vfpipe: error: %s\n", e.pretty().c_str());
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "vfpipe: error: %s\n", e.what());
    return exit_code(e.kind());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vfpipe: internal error: %s\n", e.what());
    return 1;
  }
}
