// vfpipe: the command-line front end. Subcommands: run, live, filters, info.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include "apps/vfpipe/progress.hpp"
#include "pipeline/chain.hpp"
#include "pipeline/commands.hpp"
#include "codecs/deflate/deflate.hpp"
#include "codecs/deflate/png.hpp"
#include "codecs/mmp/container.hpp"
#include "cpu/convert.hpp"
#include "pipeline/engine.hpp"
#include "core/error.hpp"
#include "core/filter_parser.hpp"
#include "io/lossless.hpp"
#include "io/open.hpp"
#include "io/synthetic.hpp"
#include "core/log.hpp"
#include "core/parallel.hpp"
#include "pipeline/profile.hpp"
#if VFPIPE_HAVE_GL
#include "display/controls.hpp"
#include "display/display_sink.hpp"
#endif
#include "stages/builtin.hpp"
#include "core/signals.hpp"
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
left out. Printed: per step and end to end, count/min/mean/p50/p90/p95/p99/max, the
steady-state throughput, drops, and the fraction of copy time hidden behind compute.

Examples:
  vfpipe profile -i "synthetic=size=1920x1080:frames=600" -f "median=radius=2,wavelet" --prefix base
  # -> base.json, base.trace.json (ui.perfetto.dev / chrome://tracing), base.html (plots)
  vfpipe run -i clip.mp4 -f conv=gauss -o out.mp4 --profile run1    # profile any run
  vfpipe profile --compare base.json new.json --fail-above 5          # regressions: exit 1
  nsys profile vfpipe run -i ...      # NVTX ranges: threads, streams, stages, copies
)";

struct RunArgs {
  std::string input, output = "null", filters, device = "auto", pix_fmt, report, codec, policy, sendcmd;
  std::string size, profile, display, view = "split", screenshot;
  std::string vsync = "on";
  int screenshot_every = 0;
  bool no_display = false, no_hud = false, glass_to_glass = false;
  double g2g_period = 250;
  std::string save_dir = ".";
  double fps = 0;
  int64_t frames = -1;
  int depth = 3, queue = 4, warmup = 0, trace_frames = 600;
  std::string completion = "event";
  size_t profile_frames = 100000;
  bool report_frames = false, no_progress = false, quiet = false, verbose = false;
  bool lossless = false;
  int compression_level = 1;
  std::string deflate_engine = "auto";
  double stats_every = 0;
};

void add_run_options(CLI::App* c, RunArgs& a, bool input_required, bool profile_cmd = false) {
  c->add_option("-i,--input", a.input, "input: file, '-' (Y4M stdin), synthetic=..., camera=N, pattern")
      ->required(input_required);
  c->add_option("-o,--output", a.output, "output: file.y4m, '-' (Y4M stdout), video file, image pattern, null")
      ->capture_default_str();
  c->add_option("-f,--filters,--vf", a.filters, "filter chain, e.g. \"format=gray,null\"");
  c->add_option("-d,--device", a.device, "backend: auto (CUDA if a GPU is usable), cuda, cpu")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->capture_default_str();
  c->add_option("--pix-fmt", a.pix_fmt,
                "output pixel format (gray, yuv420p, yuv444p, bgr24, rgb24; 16-bit: gray16le, yuv420p16le, "
                "yuv444p16le)");
  c->add_option("-n,--frames", a.frames, "stop after N input frames");
  c->add_option("--policy", a.policy, "batch: never drop (back-pressure); live: keep the newest frame")
      ->check(CLI::IsMember({"batch", "live"}));
  c->add_option("--depth", a.depth, "frames in flight on the GPU (CUDA streams), 2..16")
      ->check(CLI::Range(2, 16))
      ->capture_default_str();
  c->add_option("--completion", a.completion,
                "CUDA: how a finished frame is noticed: event (a thread waits on its download event) or "
                "hostfunc (a cudaLaunchHostFunc callback)")
      ->check(CLI::IsMember({"event", "hostfunc"}))
      ->capture_default_str();
  c->add_option("--queue", a.queue, "capacity of the source and sink queues, 1..64")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  c->add_option("--report", a.report, "write a JSON timing report to FILE");
  c->add_flag("--report-frames", a.report_frames, "include every frame's timings in the report");
  c->add_option("--warmup", a.warmup, "leave the first N frames out of the statistics")
      ->check(CLI::Range(0, 1000000));
  c->add_option("--codec", a.codec, "video output FOURCC (mp4v, MJPG, FFV1, avc1, ...)");
  c->add_flag("--lossless", a.lossless,
              "image sequences by vfpipe's PNG encoder (GPU DEFLATE); refuse lossy outputs (.mp4, .avi)");
  c->add_option("--deflate-engine", a.deflate_engine,
                "DEFLATE of PNG and .y4m.gz outputs: auto (the GPU on the CUDA backend, else libdeflate), vfpipe (vfpipe's "
                "encoder on the GPU or its CPU reference: the same bytes on every machine), libdeflate")
      ->check(CLI::IsMember({"auto", "vfpipe", "libdeflate"}))
      ->capture_default_str();
  c->add_option("--compression-level", a.compression_level, "DEFLATE level of PNG and .y4m.gz outputs (1 fast .. 9)")
      ->check(CLI::Range(1, 9))
      ->capture_default_str();
  c->add_option("--fps", a.fps, "frame rate of an image-sequence input, or to request from a camera")
      ->check(CLI::Range(0.0, 10000.0));
  c->add_option("--size", a.size, "capture size to request from a camera, WxH");
  c->add_option("--sendcmd", a.sendcmd,
                 "change filter options at given frames; FILE lines: 'FRAME FILTER key=value:...' "
                 "(FILTER: a name or #N), e.g. '30 conv kernel=sharpen'");
  if (profile_cmd)
    c->add_option("--prefix", a.profile, "output files: PREFIX.json (profile), PREFIX.trace.json (Perfetto / "
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
  c->add_flag("-q,--quiet", a.quiet, "errors only, no summary");
  c->add_flag("-v,--verbose", a.verbose, "debug messages (chain negotiation, buffers)");
}

Backend choose_backend(const std::string& device, const std::vector<std::unique_ptr<Stage>>& stages) {
  if (device == "cpu") return Backend::CPU;
  std::string missing;
  for (const auto& s : stages)
    if (!s->has_cuda()) missing += (missing.empty() ? "" : ", ") + s->name();
#if VFPIPE_HAVE_CUDA
  const cuda::DeviceInfo& gpu = cuda::probe();
  if (device == "cuda") {
    if (!gpu.usable) throw Error(ErrorKind::Gpu, "--device cuda: no usable GPU (" + gpu.reason + ")");
    if (!missing.empty())
      throw Error(ErrorKind::Usage, "--device cuda: no CUDA implementation for: " + missing);
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
  if (device == "cuda")
    throw Error(ErrorKind::Gpu, "--device cuda: this build of vfpipe has no CUDA support");
  log::warn("this build has no CUDA support; running on the CPU");
  return Backend::CPU;
#endif
}

void write_file(const std::string& path, const std::string& text, const char* what) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) throw Error(ErrorKind::Output, log::format("cannot write %s '%s'", what, path.c_str()));
}

// The profile's table on stderr and its three files.
void write_profile(const RunReport& r, const RunArgs& a, bool quiet) {
  const ProfileSummary p = summarize_profile(r);
  if (!quiet) std::fputs(profile_text(r, p).c_str(), stderr);
  write_file(a.profile + ".json", profile_json(r, p, true).dump(1) + "\n", "profile");
  write_file(a.profile + ".trace.json", chrome_trace_json(r, static_cast<size_t>(a.trace_frames)) + "\n", "trace");
  write_file(a.profile + ".html", html_report(r, p), "report");
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

struct CompressArgs {
  std::string input, output, format = "gzip", device = "auto", engine = "auto";
  int level = 6;
  int segment_kib = 64;
};

struct MmpArgs {
  std::string input, output, pix_fmt;
  double lambda = 32;
  int64_t frames = -1;
  int mode_candidates = 4;
  int block = 16;
  bool carry = false;
  bool independent_chroma = false;
  bool no_post_filter = false;
};

// A frame of `src`'s spec in the format `to` (exact integer conversion, stages/convert).
void convert_frame(const HostFrame& src, HostFrame& dst) {
  if (src.spec().format == dst.spec().format) copy_image_cpu(src.view(), dst.view());
  else convert_cpu(src.view(), dst.view());
}

// `vfpipe mmp encode`: any vfpipe input to an .mmp file, with bits, bpp, PSNR and time per frame.
int mmp_encode_command(const MmpArgs& a) {
  install_signal_handlers();
  auto src = open_source(a.input, SourceOptions{});
  FrameSpec in = src->spec(), coded = in;
  if (!a.pix_fmt.empty()) {
    if (!parse_pix_fmt(a.pix_fmt, &coded.format)) throw Error(ErrorKind::Usage, "--pix-fmt: unknown format '" + a.pix_fmt + "'");
  } else {
    // MMP codes 8-bit planes: 16-bit input keeps its layout at 8 bits; RGB becomes yuv420p.
    coded.format = with_depth(in.format, 8);
    if (coded.format != PixelFormat::GRAY8 && coded.format != PixelFormat::YUV444P) coded.format = PixelFormat::YUV420P;
  }
  mmp::Params p;
  p.lambda = a.lambda;
  p.mode_candidates = a.mode_candidates;
  p.carry = a.carry;
  p.shared_chroma = !a.independent_chroma;
  p.post_filter = !a.no_post_filter;
  p.block_log = mmp::block_log_of_size(a.block);  // 8, 16 or 32: the option's check
  const std::string out = a.output.empty() ? a.input + ".mmp" : a.output;
  mmp::Writer w(out, coded, p);
  HostFrame f(in, false), c(coded, false);
  mmp::FrameStats total;
  int64_t n = 0;
  while ((a.frames < 0 || n < a.frames) && !stop_flag().load() && src->read(f)) {
    convert_frame(f, c);
    const mmp::FrameStats st = w.write(c.view());
    std::fprintf(stderr, "frame %lld: %.0f bits, %.4f bpp, PSNR %.2f dB, %.2f s\n", static_cast<long long>(n), st.bits,
                 st.bits / (static_cast<double>(coded.width) * coded.height), st.psnr(), st.seconds);
    total += st;
    ++n;
  }
  w.close();
  std::fprintf(stderr, "%s: %lld frames %s, lambda %g: %.4f bpp, PSNR %.2f dB, %.2f s per frame\n", out.c_str(),
               static_cast<long long>(n), coded.describe().c_str(), a.lambda,
               n ? total.bits / (static_cast<double>(coded.width) * coded.height * n) : 0.0, total.psnr(),
               n ? total.seconds / n : 0.0);
  return 0;
}

// `vfpipe mmp decode`: an .mmp file to any vfpipe output, or to one PNG.
int mmp_decode_command(const MmpArgs& a) {
  mmp::Reader r(a.input);
  const FrameSpec spec = r.spec();
  HostFrame f(spec, false);
  const std::string ext = a.output.size() > 4 ? a.output.substr(a.output.size() - 4) : "";
  if (ext == ".png" && a.output.find('%') == std::string::npos) {  // one image
    if (!r.read(f)) throw Error(ErrorKind::Input, a.input + ": no frames");
    FrameSpec s = spec;
    s.format = spec.format == PixelFormat::GRAY8 ? PixelFormat::GRAY8 : PixelFormat::BGR24;
    HostFrame c(s, false);
    convert_frame(f, c);
    const ImageView v = c.view();
    write_file_atomically(a.output, encode_png(v.data[0], static_cast<size_t>(v.pitch[0]), s.width, s.height,
                                               s.format == PixelFormat::GRAY8 ? 1 : 3, s.format == PixelFormat::BGR24, 6));
    std::fprintf(stderr, "%s: %s\n", a.output.c_str(), s.describe().c_str());
    return 0;
  }
  auto sink = open_sink(a.output.empty() ? "-" : a.output, SinkOptions{});
  const auto acc = sink->accepted_formats();
  FrameSpec out = spec;
  if (!acc.empty() && std::find(acc.begin(), acc.end(), spec.format) == acc.end()) out.format = acc.front();
  HostFrame c(out, false);
  sink->open(out);
  int64_t n = 0;
  while (r.read(f)) {
    convert_frame(f, c);
    sink->write(c);
    ++n;
  }
  sink->close();
  std::fprintf(stderr, "%s: %lld frames %s\n", sink->describe().c_str(), static_cast<long long>(n), out.describe().c_str());
  return 0;
}

// `vfpipe mmp info`: the header and every frame's size.
int mmp_info_command(const MmpArgs& a) {
  mmp::Reader r(a.input);
  HostFrame f(r.spec(), false);
  std::printf("%s: MMP, %s, lambda %g, %d dictionary elements per scale, %s\n", a.input.c_str(),
              r.spec().describe().c_str(), r.params().lambda, r.params().max_dict,
              r.params().carry ? "dictionaries carried across frames" : "independent frames");
  if (plane_count(r.spec().format) == 3)
    std::printf("chroma: %s\n", r.params().shared_chroma ? "Cr continues Cb's dictionaries and models"
                                                         : "each plane with dictionaries of its own");
  std::printf("blocks: %dx%d\n", 1 << r.params().block_log, 1 << r.params().block_log);
  std::printf("post-filter: %s\n", r.params().post_filter ? "on (each plane's taps in its stream)" : "off");
  std::vector<size_t> bytes;
  int64_t n = 0;
  while (r.read(f, &bytes)) {
    size_t t = 0;
    std::string planes;
    for (size_t b : bytes) t += b, planes += (planes.empty() ? "" : " + ") + std::to_string(b);
    std::printf("frame %lld: %zu bytes (%s), %.4f bpp\n", static_cast<long long>(n++), t, planes.c_str(),
                8.0 * t / (static_cast<double>(r.spec().width) * r.spec().height));
  }
  return 0;
}

// `vfpipe compress`: our DEFLATE encoder on a file (testing, comparison with gzip/zlib).
int compress_command(const CompressArgs& a) {
  std::error_code ec;
  if (std::filesystem::is_directory(a.input, ec)) throw Error(ErrorKind::Input, "'" + a.input + "' is a directory");
  std::ifstream in(a.input, std::ios::binary);
  if (!in) throw Error(ErrorKind::Input, "cannot open '" + a.input + "'");
  const std::vector<uint8_t> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  deflate::Options o;
  o.level = a.level;
  o.segment_bytes = static_cast<size_t>(a.segment_kib) * 1024;
  LosslessEncoder enc(a.level, a.device != "cpu" && a.engine != "libdeflate", a.engine == "vfpipe");
#if VFPIPE_HAVE_CUDA
  if (a.device == "cuda" && !enc.on_gpu()) log::warn("no usable GPU (%s): compressing on the CPU", cuda::probe().reason.c_str());
#endif
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<uint8_t> z = enc.compress(data.data(), data.size(), o,
                                              a.format == "zlib"  ? DeflateFormat::Zlib
                                              : a.format == "raw" ? DeflateFormat::Raw
                                                                  : DeflateFormat::Gzip);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string out = !a.output.empty() ? a.output
                          : a.input + (a.format == "zlib" ? ".zz" : a.format == "raw" ? ".deflate" : ".gz");
  write_file(out, std::string(z.begin(), z.end()), "output");
  std::fprintf(stderr, "%s: %zu -> %zu bytes (%.2f%%, ratio %.3f) in %.3f s, %.1f MB/s, level %d, %s, %d KiB segments, %s\n",
               out.c_str(), data.size(), z.size(), data.empty() ? 0.0 : 100.0 * z.size() / data.size(),
               z.empty() ? 0.0 : static_cast<double>(data.size()) / z.size(), s, data.size() / 1e6 / std::max(s, 1e-9),
               a.level, a.format.c_str(), a.segment_kib, enc.engine());
  return 0;
}

int run_command(RunArgs& a, bool live) {
  if (a.quiet) log::set_level(log::Level::Error);
  if (a.verbose) log::set_level(log::Level::Debug);
  install_signal_handlers();

  // Everything the user typed is validated before any input or output is opened.
  auto stages = build_stages(a.filters);
  std::optional<PixelFormat> forced;
  if (!a.pix_fmt.empty()) {
    PixelFormat f;
    if (!parse_pix_fmt(a.pix_fmt, &f))
      throw Error(ErrorKind::Usage, "--pix-fmt: unsupported pixel format '" + a.pix_fmt +
                                        "' (supported: " + pix_fmt_list() + ")");
    forced = f;
  }
  Backend backend = choose_backend(a.device, stages);

  SourceOptions so;
  so.pinned = backend == Backend::CUDA;
  so.fps = a.fps;
  if (!a.size.empty() && std::sscanf(a.size.c_str(), "%dx%d", &so.width, &so.height) != 2)
    throw Error(ErrorKind::Usage, "--size: expected WxH, got '" + a.size + "'");
  auto src = open_source(a.input, so);
  SinkOptions ko;
  ko.codec = a.codec;
  ko.lossless = a.lossless;
  ko.compression_level = a.compression_level;
  ko.gpu = backend == Backend::CUDA && a.deflate_engine != "libdeflate";
  ko.deflate_reference = a.deflate_engine == "vfpipe";
  std::unique_ptr<Sink> sink = open_sink(a.output, ko);
  // A single image: the run must stop in time (-n, or an input known to be short enough).
  if (const int64_t max = sink->max_frames(); max > 0) {
    const int64_t n = src->frame_count();
    const bool fits = a.frames >= 0 ? a.frames <= max : (n > 0 && n <= max);
    if (!fits)
      throw Error(ErrorKind::Usage,
                  log::format("'%s' holds %lld image; the input has %s frames: add -n %lld (ffmpeg: -frames:v 1), "
                              "or write every frame with a pattern such as frames/%%06d.png",
                              a.output.c_str(), static_cast<long long>(max),
                              n > 0 ? std::to_string(n).c_str() : "more", static_cast<long long>(max)));
  }
  if (live && a.display.empty() && !a.no_display) a.display = "window";
  if (a.glass_to_glass && a.display.empty())
    throw Error(ErrorKind::Usage, "--glass-to-glass needs --display (the screen shows the pattern the camera films)");
#if VFPIPE_HAVE_GL
  DisplaySink* display_sink = nullptr;
  std::unique_ptr<LiveControls> controls;
  if (!a.display.empty()) {
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
    display_sink = ds.get();
    sink = std::move(ds);
  }
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

  EngineConfig cfg;
  cfg.backend = backend;
  std::string policy = a.policy.empty() ? (live || src->is_live() ? "live" : "batch") : a.policy;
  cfg.policy = policy == "live" ? Policy::Live : Policy::Batch;
  cfg.depth = a.depth;
  cfg.completion = a.completion == "hostfunc" ? Completion::HostFunc : Completion::Event;
  cfg.queue = a.queue;
  cfg.max_frames = a.frames;
  cfg.warmup = a.warmup;
  cfg.max_records = a.profile_frames;
  cfg.stop = &stop_flag();
  int64_t total = src->frame_count();
  if (a.frames >= 0 && (total < 0 || a.frames < total)) total = a.frames;
  Progress progress(!a.no_progress && !a.quiet && a.stats_every == 0, total);
  cfg.progress = [&](int64_t done, int64_t dropped) { progress.update(done, dropped); };
  std::unique_ptr<PeriodicStats> stats;
  if (a.stats_every > 0) {
    std::function<size_t()> gpu_memory;
#if VFPIPE_HAVE_CUDA
    if (backend == Backend::CUDA) gpu_memory = [] { return cuda::device_memory_used(); };
#endif
    stats = std::make_unique<PeriodicStats>(a.stats_every, gpu_memory);
    cfg.on_frame = [&](const FrameRecord& rec, int64_t dropped) { stats->frame(rec, dropped); };
  }
#if VFPIPE_HAVE_GL
  if (display_sink) {
    display_sink->set_source_spec(chain.input());
    controls = std::make_unique<LiveControls>(chain);
    display_sink->set_controls(controls.get());
  }
#endif
  bool live_controls = false;
#if VFPIPE_HAVE_GL
  live_controls = controls != nullptr;
#endif
  if (!commands.empty() || live_controls)
    cfg.before_frame = [&](int64_t index, Chain& c) {
      if (!commands.empty()) apply_commands(commands, index, c);
#if VFPIPE_HAVE_GL
      if (controls) controls->apply(c);
#endif
    };

  log::info("%s -> [%s] -> %s on %s", src->describe().c_str(), chain.describe().c_str(),
            sink->describe().c_str(), backend_name(backend));
  RunResult res = run_pipeline(*src, chain, *sink, cfg);
  progress.finish();
  if (stats) stats->finish(res.report.dropped);
#if VFPIPE_HAVE_GL
  if (display_sink && !a.quiet && display_sink->shown() > 0)
    std::fprintf(stderr,
                 "  display: %lld frames shown (%lld straight from CUDA), %lld skipped to keep up; per frame %.3f ms on "
                 "the host (upload + draw + present), %.3f ms on the GPU (upload %.3f + draw %.3f); %s\n",
                 static_cast<long long>(display_sink->shown()), static_cast<long long>(display_sink->shown_from_device()),
                 static_cast<long long>(display_sink->skipped()),
                 display_sink->mean_show_ms(), display_sink->mean_gpu_ms(), display_sink->mean_gpu_upload_ms(),
                 display_sink->mean_gpu_draw_ms(), display_sink->renderer().c_str());
  if (display_sink && a.glass_to_glass) {
    const G2GResult& g = display_sink->glass_to_glass();
    std::fprintf(stderr,
                 "  glass-to-glass: %zu flips measured, %d not seen by the camera; delay ms: min %.1f, p50 %.1f, mean "
                 "%.1f, p95 %.1f, max %.1f\n",
                 g.delays_ms.size(), g.missed, g.ms.min, g.ms.p50, g.ms.mean, g.ms.p95, g.ms.max);
  }
#endif
  res.report.filters = a.filters;
  // A profiled run prints the profile's fuller table instead of the summary's.
  if (!a.quiet && res.report.frames_out > 0 && a.profile.empty()) std::fputs(res.report.text().c_str(), stderr);
  if (!a.quiet)
    for (size_t i = 0; i < chain.size(); ++i)
      if (const std::string r = chain.step(i).stage->report(); !r.empty()) std::fprintf(stderr, "  %s\n", r.c_str());
  if (!a.report.empty()) write_file(a.report, res.report.json(a.report_frames) + "\n", "report");
  if (!a.profile.empty() && res.report.frames_out > 0) write_profile(res.report, a, a.quiet);
  if (res.error) std::rethrow_exception(res.error);
  if (res.report.frames_out == 0 && !res.report.interrupted)
    log::warn("no frames were processed");
  if (int sig = stop_flag().load()) {
    log::info("stopped by signal %d after %lld frames; output closed cleanly", sig,
              static_cast<long long>(res.report.frames_out));
    return 128 + sig;
  }
  return 0;
}

std::string type_name(const OptionSpec& o) {
  switch (o.type) {
    case OptionSpec::Type::Int: return log::format("int %g..%g", o.min, o.max);
    case OptionSpec::Type::Float: return log::format("float %g..%g", o.min, o.max);
    case OptionSpec::Type::Bool: return "bool";
    case OptionSpec::Type::Choice: {
      std::string r;
      for (const auto& c : o.choices) r += (r.empty() ? "" : "|") + c;
      return r;
    }
    case OptionSpec::Type::String: return "string";
  }
  return "";
}

void print_options(const std::vector<OptionSpec>& opts) {
  for (const auto& o : opts) {
    std::string names = o.name;
    for (const auto& al : o.alias_names) names += ", " + al;
    std::printf("    %-22s %-22s default %-10s %s\n", names.c_str(), type_name(o).c_str(),
                o.default_value.empty() ? "-" : o.default_value.c_str(), o.help.c_str());
  }
}

int filters_command(const std::string& name) {
  const Registry& reg = registry();
  if (!name.empty()) {
    if (name == "synthetic") {
      std::printf("synthetic (source): moving test scene with optional noise\n  options:\n");
      print_options(synthetic_options());
      return 0;
    }
    const StageInfo* s = reg.find(name);
    if (!s) throw Error(ErrorKind::Usage, "unknown filter '" + name + "' (see 'vfpipe filters')");
    std::printf("%s", s->name.c_str());
    if (!s->aliases.empty()) {
      std::printf(" (alias");
      for (const auto& al : s->aliases) std::printf(" %s", al.c_str());
      std::printf(")");
    }
    std::printf(": %s\n\n  %s\n\n  backends: cpu%s\n  input formats:", s->summary.c_str(),
                s->description.c_str(), s->cuda ? ", cuda" : "");
    for (PixelFormat f : s->formats) std::printf(" %s", pix_fmt_name(f));
    std::printf("\n  options (positional values follow this order):\n");
    if (s->options.empty()) std::printf("    none\n");
    print_options(s->options);
    std::string live;
    size_t n_live = 0;
    for (const auto& o : s->options)
      if (o.live) live += (n_live++ ? ", " : "") + o.name;
    if (s->options.empty()) {
      // nothing to change
    } else if (n_live == 0) {
      std::printf("  while running: no option can change (--sendcmd refuses)\n");
    } else if (n_live == s->options.size()) {
      std::printf("  while running: every option can change (--sendcmd)\n");
    } else {
      std::printf("  while running: %s can change (--sendcmd)\n", live.c_str());
    }
    if (!s->live.option.empty())
      std::printf("  display keys: +/- step '%s', T switches the filter off\n", s->live.option.c_str());
    if (!s->examples.empty()) {
      std::printf("  examples:\n");
      for (const auto& e : s->examples) std::printf("    -f \"%s\"\n", e.c_str());
    }
    return 0;
  }
  std::printf("Filters (use in -f \"name=key=value:...,next\"; 'vfpipe filters NAME' for details):\n");
  for (const auto& s : reg.all())
    std::printf("  %-10s %-5s %s\n", s.name.c_str(), s.cuda ? "cuda" : "cpu", s.summary.c_str());
  std::printf("\nSources: synthetic ('vfpipe filters synthetic'), Y4M, camera, video, images.\n");
  std::printf("Pixel formats: %s\n", pix_fmt_list().c_str());
  return 0;
}

int info_command() {
  std::printf("vfpipe %s\n", VFPIPE_VERSION);
  std::printf("  OpenCV I/O: %s\n", have_opencv() ? "yes" : "no (Y4M and synthetic only)");
  std::printf("  GL libraries found at build time: %s\n", VFPIPE_HAVE_GL ? "yes" : "no");
#if VFPIPE_HAVE_CUDA
  const cuda::DeviceInfo& g = cuda::probe();
  std::printf("  CUDA backend: built in\n");
  if (g.usable)
    std::printf("  GPU: %s (compute %d.%d, %.1f GiB, %d copy engines)\n", g.name.c_str(), g.cc_major,
                g.cc_minor, g.total_mem / 1073741824.0, g.async_engines);
  else
    std::printf("  GPU: none usable (%s); --device auto runs on the CPU\n", g.reason.c_str());
#else
  std::printf("  CUDA backend: not built (CPU only)\n");
#endif
  std::printf("  CPU pool: %d threads of %d cores (oneTBB; --threads N)\n", cpu_threads(), available_cores());
  std::printf("  pixel formats: %s\n", pix_fmt_list().c_str());
  return 0;
}

int exit_code(ErrorKind k) { return k == ErrorKind::Usage ? 2 : 1; }

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
  CLI::App app{"vfpipe: real-time video filtering on NVIDIA GPUs, with CPU fallback.\n"
               "Frames flow source -> GPU stages (pinned double-buffered copies, several CUDA "
               "streams) -> sink."};
  app.footer(kExamples);
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

  RunArgs run_args, live_args;
  auto* run = app.add_subcommand("run", "process a file, pipe or generated stream (batch: nothing is dropped)");
  add_run_options(run, run_args, false);
  run->footer(kExamples);
  auto* live = app.add_subcommand("live", "process a camera (or any source) keeping the newest frame; counts drops");
  add_run_options(live, live_args, false);  // camera=0 when no -i
  live->footer(kLiveHelp);
  RunArgs prof_args;
  prof_args.profile = "vfpipe-profile";
  prof_args.warmup = 10;
  prof_args.output = "null";
  std::vector<std::string> compare;
  double threshold = 5;
  auto* profile = app.add_subcommand("profile", "latency profile of a run: table, JSON, Perfetto trace, HTML plots");
  add_run_options(profile, prof_args, false, true);
  profile->add_option("--compare", compare, "compare two profiles (A.json B.json) instead of running")
      ->expected(2);
  profile->add_option("--fail-above", threshold, "with --compare: exit 1 if a p50 of B is more than PCT% above A")
      ->capture_default_str();
  profile->footer(kProfileHelp);
  CompressArgs comp_args;
  MmpArgs mmp_args;
  auto* mmp_cmd = app.add_subcommand("mmp", "MMP intra codec (docs/mmp.md): encode, decode, info")->require_subcommand(1);
  auto* mmp_enc = mmp_cmd->add_subcommand("encode", "encode any vfpipe input into an .mmp file");
  mmp_enc->add_option("input", mmp_args.input, "input (file, image pattern, Y4M, synthetic=...)")->required();
  mmp_enc->add_option("-o,--output", mmp_args.output, "output .mmp (default INPUT.mmp)");
  mmp_enc->add_option("--lambda", mmp_args.lambda, "Lagrangian multiplier: larger = fewer bits, lower quality")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str();
  mmp_enc->add_option("--pix-fmt", mmp_args.pix_fmt, "gray, yuv420p or yuv444p (default: gray/yuv444p kept, else yuv420p)");
  mmp_enc->add_option("-n,--frames", mmp_args.frames, "stop after N frames");
  mmp_enc->add_flag("--carry", mmp_args.carry,
                    "keep each plane's dictionaries and models from frame to frame (fewer bits on video; frames "
                    "then decode only in order)");
  mmp_enc->add_flag("--independent-chroma", mmp_args.independent_chroma,
                    "code Cr with dictionaries of its own instead of continuing Cb's (the two chroma planes "
                    "then encode and decode in parallel; Cr costs more bits)");
  mmp_enc->add_flag("--no-post-filter", mmp_args.no_post_filter,
                    "leave out the restoration post-filter (least-squares taps per activity class, sent with "
                    "each plane; about +0.3 dB on photographs at 0.5 bpp)");
  mmp_enc->add_option("--block", mmp_args.block,
                      "block size: 16, or 8 (faster, for small images) or 32 (larger prediction units and "
                      "dictionary scales up to 32x32; slower)")
      ->check(CLI::IsMember({8, 16, 32}))
      ->capture_default_str();
  mmp_enc->add_option("--modes", mmp_args.mode_candidates,
                      "prediction modes searched fully per unit, best by prediction error first (1..11; more: "
                      "slower, slightly fewer bits)")
      ->check(CLI::Range(1, 11))
      ->capture_default_str();
  auto* mmp_dec = mmp_cmd->add_subcommand("decode", "decode an .mmp file to Y4M, images or one PNG");
  mmp_dec->add_option("input", mmp_args.input, ".mmp file")->required();
  mmp_dec->add_option("-o,--output", mmp_args.output, "out.png (first frame), out.y4m, frames/%06d.png, '-' (Y4M stdout)");
  auto* mmp_info = mmp_cmd->add_subcommand("info", "show an .mmp file's header and frame sizes");
  mmp_info->add_option("input", mmp_args.input, ".mmp file")->required();
  mmp_cmd->footer("\nExample: vfpipe mmp encode photo.y4m -o photo.mmp --lambda 40 && vfpipe mmp decode photo.mmp -o back.png\n");
  auto* compress = app.add_subcommand("compress", "compress a file with vfpipe's DEFLATE encoder (gzip, zlib or raw)");
  compress->add_option("input", comp_args.input, "file to compress")->required();
  compress->add_option("-o,--output", comp_args.output, "output file (default: INPUT.gz / .zz / .deflate)");
  compress->add_option("--format", comp_args.format, "container: gzip (RFC 1952), zlib (RFC 1950), raw (RFC 1951)")
      ->check(CLI::IsMember({"gzip", "zlib", "raw"}))
      ->capture_default_str();
  compress->add_option("--level", comp_args.level, "0 stored .. 9 best (match search depth)")
      ->check(CLI::Range(0, 9))
      ->capture_default_str();
  compress->add_option("-d,--device", comp_args.device, "auto (the GPU if usable), cuda, cpu")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->capture_default_str();
  compress->add_option("--engine", comp_args.engine,
                       "auto (vfpipe's GPU encoder, else libdeflate), vfpipe (its GPU encoder or CPU reference: the "
                       "same bytes everywhere), libdeflate")
      ->check(CLI::IsMember({"auto", "vfpipe", "libdeflate"}))
      ->capture_default_str();
  compress->add_option("--segment", comp_args.segment_kib, "segment size in KiB (4..64, the GPU's unit of work)")
      ->check(CLI::Range(4, 64))
      ->capture_default_str();
  compress->footer("\nvfpipe's DEFLATE encoder (docs/deflate.md): on the GPU when one is usable, else its CPU\n"
                   "reference; both write the same bytes, which any gzip/zlib reads.\n"
                   "Example: vfpipe compress frames.raw --level 1 && gzip -t frames.raw.gz\n");
  std::string filter_name;
  auto* filters = app.add_subcommand("filters", "list the filters (stages) and their options");
  filters->add_option("name", filter_name, "show one filter in detail");
  app.add_subcommand("info", "show build features and the GPU");

  try {
    app.parse(argc, argv);
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
    if (*run) return run_command(run_args, false);
    if (*live) {
      if (live_args.input.empty()) live_args.input = "camera=0";
      return run_command(live_args, true);
    }
    if (*profile) {
      if (!compare.empty()) return compare_command(compare, threshold);
      if (prof_args.input.empty()) throw Error(ErrorKind::Usage, "profile: --input is required (or --compare A B)");
      return run_command(prof_args, false);
    }
    if (*compress) return compress_command(comp_args);
    if (*mmp_enc) return mmp_encode_command(mmp_args);
    if (*mmp_dec) return mmp_decode_command(mmp_args);
    if (*mmp_info) return mmp_info_command(mmp_args);
    if (*filters) return filters_command(filter_name);
    return info_command();
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
