// `vfpipe mmp encode|decode|info`: the MMP intra codec on files (docs/mmp.md).
#include <tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "apps/vfpipe/cli.hpp"
#include "batch/items.hpp"
#include "codecs/deflate/png.hpp"
#include "codecs/mmp/container.hpp"
#include "codecs/mmp/search.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/signals.hpp"
#include "cpu/convert.hpp"
#include "io/lossless.hpp"
#include "io/open.hpp"
#if VFPIPE_HAVE_CUDA
#include "core/gpu.hpp"
#include "cuda/mmp_search.hpp"
#endif

namespace vfp {
namespace {

struct MmpArgs {
  std::string input, output, pix_fmt, tile = "0", tile_mode = "sync", tile_scan = "raster", device = "auto",
                                      gpu_search = "blocks", gpus;
  std::string dict_full = mmp::Params{}.replace_least_used ? "replace" : "stop";
  double lambda = 32;
  double start = 0, duration = -1, to = -1;  // -ss, -t, -to (seconds of the input)
  int64_t frames = -1;
  int mode_candidates = 4;
  int min_unit = 4;
  int max_dict = mmp::Params{}.max_dict;
  int block = 16;
  bool carry = false;
  bool independent_chroma = false;
  bool no_post_filter = false;
  int frames_in_flight = 0;                      // 0: two a GPU
  bool overwrite = false, no_overwrite = false;  // -y, -n
  Overwrite overwrite_rule() const { return vfp::overwrite_rule(overwrite, no_overwrite); }
};

// A frame of `src`'s spec in the format `to` (exact integer conversion, stages/convert).
void convert_frame(const HostFrame& src, HostFrame& dst) {
  if (src.spec().format == dst.spec().format)
    copy_image_cpu(src.view(), dst.view());
  else
    convert_cpu(src.view(), dst.view());
}

// Where the encoder's leaf search runs: "cuda" (or an error), "cpu", "auto" (the GPU when
// one is usable, else the CPU with one line). The bytes are the same either way.
// `gpu_search` says how the GPU is used (cuda::MmpGpuSearch: blocks, blocks-ungraphed, units).
std::shared_ptr<mmp::LeafSearch> leaf_search(const std::string& device, const std::string& gpu_search) {
  if (device == "cpu") return nullptr;
#if VFPIPE_HAVE_CUDA
  const cuda::MmpGpuSearch how = gpu_search == "units"              ? cuda::MmpGpuSearch::Units
                                 : gpu_search == "blocks-ungraphed" ? cuda::MmpGpuSearch::BlocksUngraphed
                                                                    : cuda::MmpGpuSearch::Blocks;
  if (device == "cuda" || cuda::probe().usable) return cuda::make_mmp_leaf_search(how);
  log::warn("MMP: no usable CUDA GPU (%s); searching on the CPU", cuda::probe().reason.c_str());
#else
  (void)gpu_search;
  if (device == "cuda") throw Error(ErrorKind::Usage, "--device cuda: this vfpipe was built without CUDA");
#endif
  return nullptr;
}

// `vfpipe mmp encode`: any vfpipe input to an .mmp file, with bits, bpp, PSNR and time per frame.
int mmp_encode_command(const MmpArgs& a) {
  install_signal_handlers();
  SourceOptions so;
  so.start = a.start;
  so.duration = window_duration(a.start, a.duration, a.to);
  auto src = open_source(a.input, so);
  FrameSpec in = src->spec(), coded = in;
  if (!a.pix_fmt.empty()) {
    if (!parse_pix_fmt(a.pix_fmt, &coded.format))
      throw Error(ErrorKind::Usage, "--pix-fmt: unknown format '" + a.pix_fmt + "'");
  } else {
    // MMP codes 8-bit planes: 16-bit input keeps its layout at 8 bits; RGB becomes yuv420p.
    coded.format = with_depth(in.format, 8);
    if (coded.format != PixelFormat::GRAY8 && coded.format != PixelFormat::YUV444P) coded.format = PixelFormat::YUV420P;
  }
  mmp::Params p;
  p.lambda = a.lambda;
  p.mode_candidates = a.mode_candidates;
  p.min_unit = a.min_unit;
  p.max_dict = a.max_dict;
  p.replace_least_used = a.dict_full == "replace";
  p.carry = a.carry;
  p.shared_chroma = !a.independent_chroma;
  p.post_filter = !a.no_post_filter;
  p.block_log = mmp::block_log_of_size(a.block);  // 8, 16 or 32: the option's check
  mmp::parse_tile_size(a.tile, &p);
  if (!mmp::parse_tile_mode(a.tile_mode, &p.tile_mode))
    throw Error(ErrorKind::Usage, "--tile-mode: '" + a.tile_mode + "' (independent, sync-dict or sync)");
  if (!mmp::parse_tile_scan(a.tile_scan, &p.tile_scan))
    throw Error(ErrorKind::Usage, "--tile-scan: '" + a.tile_scan + "' (raster or wavefront)");
  mmp::check_tiles(p);
  // Before the search starts (a GPU's context, or the warning that there is none).
  const std::string out = a.output.empty() ? a.input + ".mmp" : a.output;
  check_output_is_not_input(a.input, out);
  check_overwrite(out, a.overwrite_rule());
  report_streams_left_out(*src, out, VideoOptions{});
  p.search = leaf_search(a.device, a.gpu_search);
  // --gpus: a search on each; frames in flight go to them in turn (frames are independent
  // without --carry, so each GPU keeps its own dictionary mirrors).
  std::vector<std::shared_ptr<mmp::LeafSearch>> searches{p.search};
  if (!a.gpus.empty()) {
    if (!p.search) {
      log::warn("--gpus %s: the search runs on the CPU", a.gpus.c_str());
    } else if (p.carry) {
      throw Error(ErrorKind::Usage,
                  "--gpus with --carry: carried dictionaries code each frame after the one before, "
                  "on one GPU");
    } else {
#if VFPIPE_HAVE_CUDA
      const std::vector<int> devices =
          batch::parse_gpus(a.gpus, cuda::device_count(), std::getenv("CUDA_VISIBLE_DEVICES"));
      if (devices.empty()) throw Error(ErrorKind::Usage, "--gpus " + a.gpus + ": no GPU (use --device cpu)");
      searches.clear();
      for (int d : devices) {
        cuda::DeviceScope on(d);
        searches.push_back(leaf_search("cuda", a.gpu_search));
      }
      p.search = searches.front();
#endif
    }
  }
  mmp::Writer w(out, coded, p);
  // Frames without carry are independent: up to --frames-in-flight of them are read, encoded
  // at once (the GPU search takes several rounds from several frames; the CPU's tiles share
  // the cores) and written in order. With carry each frame needs the one before.
  const int in_flight = p.carry                  ? 1
                        : a.frames_in_flight > 0 ? a.frames_in_flight
                                                 : 2 * static_cast<int>(searches.size());
  HostFrame f(in, false);
  std::vector<std::unique_ptr<HostFrame>> batch;
  std::vector<std::vector<std::vector<uint8_t>>> payloads(static_cast<size_t>(in_flight));
  std::vector<mmp::FrameStats> stats(static_cast<size_t>(in_flight));
  for (int i = 0; i < in_flight; ++i) batch.push_back(std::make_unique<HostFrame>(coded, false));
  mmp::FrameStats total;
  int64_t n = 0;
  bool more = true;
  const auto t0 = std::chrono::steady_clock::now();
  while (more) {
    int got = 0;
    while (got < in_flight && (a.frames < 0 || n + got < a.frames) && !stop_flag().load() && src->read(f)) {
      convert_frame(f, *batch[static_cast<size_t>(got)]);
      ++got;
    }
    more = got == in_flight;
    if (got == 0) break;
    if (got == 1 || in_flight == 1) {
      for (int i = 0; i < got; ++i) stats[static_cast<size_t>(i)] = w.write(batch[static_cast<size_t>(i)]->view());
    } else {
      tbb::parallel_for(0, got, [&](int i) {
        mmp::Params pi = w.params();
        pi.search = searches[static_cast<size_t>(i) % searches.size()];
        stats[static_cast<size_t>(i)] = mmp::encode_frame(batch[static_cast<size_t>(i)]->view(), pi, nullptr,
                                                          &payloads[static_cast<size_t>(i)], nullptr);
      });
      for (int i = 0; i < got; ++i) w.append(payloads[static_cast<size_t>(i)]);
    }
    for (int i = 0; i < got; ++i) {
      const mmp::FrameStats& st = stats[static_cast<size_t>(i)];
      std::fprintf(stderr, "frame %lld: %.0f bits, %.4f bpp, PSNR %.2f dB, %.2f s\n", static_cast<long long>(n),
                   st.bits, st.bits / (static_cast<double>(coded.width) * coded.height), st.psnr(), st.seconds);
      total += st;
      ++n;
    }
  }
  w.close();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (n > 0)
    std::fprintf(stderr, "encoder time per frame (summed over threads): %s\n",
                 total.breakdown(static_cast<double>(n)).c_str());
  std::string where = p.search ? "" : "cpu";
  for (const auto& s : searches) {
    if (!s) continue;
    if (!s->stats().empty()) std::fprintf(stderr, "search on %s: %s\n", s->name().c_str(), s->stats().c_str());
    where += (where.empty() ? "" : "+") + s->name();
  }
  // Per frame: the wall time (with frames in flight, each frame's own encode takes longer).
  const std::string overlap = in_flight > 1 && n > 1
                                  ? log::format(" with %d frames in flight (each %.2f s)", in_flight, total.seconds / n)
                                  : "";
  std::fprintf(stderr, "%s: %lld frames %s, lambda %g: %.4f bpp, PSNR %.2f dB, %.2f s per frame%s (search on %s)\n",
               out.c_str(), static_cast<long long>(n), coded.describe().c_str(), a.lambda,
               n ? total.bits / (static_cast<double>(coded.width) * coded.height * n) : 0.0, total.psnr(),
               n ? wall / n : 0.0, overlap.c_str(), where.c_str());
  return 0;
}

// `vfpipe mmp decode`: an .mmp file to any vfpipe output, or to one PNG.
int mmp_decode_command(const MmpArgs& a) {
  mmp::Reader r(a.input);
  const FrameSpec spec = r.spec();
  HostFrame f(spec, false);
  const std::string ext = a.output.size() > 4 ? a.output.substr(a.output.size() - 4) : "";
  const Overwrite rule = a.overwrite_rule();
  check_output_is_not_input(a.input, a.output);
  if (ext == ".png" && a.output.find('%') == std::string::npos) {  // one image
    check_overwrite(a.output, rule);
    if (!r.read(f)) throw Error(ErrorKind::Input, a.input + ": no frames");
    FrameSpec s = spec;
    s.format = spec.format == PixelFormat::GRAY8 ? PixelFormat::GRAY8 : PixelFormat::BGR24;
    HostFrame c(s, false);
    convert_frame(f, c);
    const ImageView v = c.view();
    std::vector<uint8_t> png = encode_png(v.data[0], static_cast<size_t>(v.pitch[0]), s.width, s.height,
                                          s.format == PixelFormat::GRAY8 ? 1 : 3, s.format == PixelFormat::BGR24, 6);
    if (s.non_square_pixels()) png_add_pixel_aspect(png, s.sar.num, s.sar.den);
    write_file_atomically(a.output, png);
    std::fprintf(stderr, "%s: %s\n", a.output.c_str(), s.describe().c_str());
    return 0;
  }
  SinkOptions so;
  so.overwrite = rule;  // video files, as `vfpipe run` treats them
  auto sink = open_sink(a.output.empty() ? "-" : a.output, so);
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
  std::fprintf(stderr, "%s: %lld frames %s\n", sink->describe().c_str(), static_cast<long long>(n),
               out.describe().c_str());
  return 0;
}

// `vfpipe mmp info`: the header and every frame's size.
int mmp_info_command(const MmpArgs& a) {
  mmp::Reader r(a.input);
  HostFrame f(r.spec(), false);
  std::printf("%s: MMP, %s, lambda %g, %d dictionary elements per scale (%s), %s\n", a.input.c_str(),
              r.spec().describe().c_str(), r.params().lambda, r.params().max_dict,
              r.params().replace_least_used ? "a full scale replaces its least used" : "a full scale takes no more",
              r.params().carry ? "dictionaries carried across frames" : "independent frames");
  if (plane_count(r.spec().format) == 3)
    std::printf("chroma: %s\n", r.params().shared_chroma ? "Cr continues Cb's dictionaries and models"
                                                         : "each plane with dictionaries of its own");
  std::printf("blocks: %dx%d\n", 1 << r.params().block_log, 1 << r.params().block_log);
  if (r.params().tiled())
    std::printf("tiles: %dx%d (luma samples), %s%s\n", r.params().tile_w, r.params().tile_h,
                r.params().tile_mode == mmp::TileMode::Independent ? "independent (own dictionaries and models)"
                : r.params().tile_mode == mmp::TileMode::SyncDictionaries
                    ? "sync-dict (dictionaries shared, updated in rounds; models per tile)"
                    : "sync (dictionaries and models shared, updated in rounds)",
                r.params().tile_scan == mmp::TileScan::Wavefront ? ", wavefront rounds" : "");
  else
    std::printf("tiles: none\n");
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

}  // namespace

void add_mmp_commands(CLI::App& app, Subcommands& out) {
  auto args = std::make_shared<MmpArgs>();
  MmpArgs& mmp_args = *args;
  auto* mmp_cmd =
      app.add_subcommand("mmp", "MMP intra codec (docs/mmp.md): encode, decode, info")->require_subcommand(1);
  auto* mmp_enc = mmp_cmd->add_subcommand("encode", "encode any vfpipe input into an .mmp file");
  mmp_enc->add_option("input,-i,--input", mmp_args.input, "input (file, image pattern, Y4M, synthetic=...)")
      ->required();
  mmp_enc->add_option("-o,--output", mmp_args.output, "output .mmp (default INPUT.mmp)");
  mmp_enc->add_option("--lambda", mmp_args.lambda, "Lagrangian multiplier: larger = fewer bits, lower quality")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str();
  mmp_enc->add_option("--pix-fmt", mmp_args.pix_fmt,
                      "gray, yuv420p or yuv444p (default: gray/yuv444p kept, else yuv420p)");
  mmp_enc->add_option("-n,--frames", mmp_args.frames, "stop after N frames");
  add_time_window_options(mmp_enc, &mmp_args.start, &mmp_args.duration, &mmp_args.to);
  add_overwrite_flags(mmp_enc, &mmp_args.overwrite, &mmp_args.no_overwrite, "output file");
  mmp_enc
      ->add_option("-d,--device", mmp_args.device,
                   "where the encoder's dictionary search runs: auto (the GPU if one is usable), cuda, cpu; the "
                   "bytes are the same")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->capture_default_str();
  mmp_enc
      ->add_option("--gpu-search", mmp_args.gpu_search,
                   "how the GPU encoder works (for measurements; the bytes are the same): blocks (a block's whole "
                   "search on the GPU, one CUDA graph a block; with sync tiles one for a round's blocks), "
                   "blocks-ungraphed (the same kernels launched one by "
                   "one), units (only the dictionary search on the GPU, one call per prediction unit)")
      ->check(CLI::IsMember({"blocks", "blocks-ungraphed", "units"}))
      ->capture_default_str();
  mmp_enc->add_flag("--carry", mmp_args.carry,
                    "keep each plane's dictionaries and models from frame to frame (fewer bits on video; frames "
                    "then decode only in order)");
  mmp_enc->add_flag("--independent-chroma", mmp_args.independent_chroma,
                    "code Cr with dictionaries of its own instead of continuing Cb's (the two chroma planes "
                    "then encode and decode in parallel; Cr costs more bits)");
  mmp_enc->add_flag("--no-post-filter", mmp_args.no_post_filter,
                    "leave out the restoration post-filter (least-squares taps per activity class, sent with "
                    "each plane; about +0.3 dB on photographs at 0.5 bpp)");
  mmp_enc
      ->add_option("--block", mmp_args.block,
                   "block size: 16, or 8 (faster, for small images) or 32 (larger prediction units and "
                   "dictionary scales up to 32x32; slower)")
      ->check(CLI::IsMember({8, 16, 32}))
      ->capture_default_str();
  mmp_enc
      ->add_option("--modes", mmp_args.mode_candidates,
                   "prediction modes searched fully per unit, best by prediction error first (1..11; more: "
                   "slower, slightly fewer bits)")
      ->check(CLI::Range(1, 11))
      ->capture_default_str();
  mmp_enc
      ->add_option("--min-unit", mmp_args.min_unit,
                   "the smallest prediction unit: 4, 8 or 16 samples a side (larger: fewer units that wait for "
                   "each other, less search work (CPU encode 25% faster at 8), some more bits)")
      ->check(CLI::IsMember({4, 8, 16}))
      ->capture_default_str();
  mmp_enc
      ->add_option("--dict", mmp_args.max_dict,
                   "dictionary elements per scale (64..4096; fewer: a faster search, more bits; see --dict-full)")
      ->check(CLI::Range(64, 4096))
      ->capture_default_str();
  mmp_enc
      ->add_option("--dict-full", mmp_args.dict_full,
                   "what a full dictionary scale does with a new element: replace its least used learnt element, or "
                   "stop (take no more; 512 elements that replace code as well as 4096 that stop)")
      ->check(CLI::IsMember({"stop", "replace"}))
      ->capture_default_str();
  mmp_enc
      ->add_option("--tile", mmp_args.tile,
                   "tiles of WxH luma samples (or N for NxN; multiples of the block size), coded in parallel "
                   "on every core; 0 = untiled")
      ->capture_default_str();
  mmp_enc
      ->add_option("--frames-in-flight", mmp_args.frames_in_flight,
                   "frames encoded at once (without --carry; written in order, the same bytes): more keeps the "
                   "GPU busier when a frame's rounds are small (default: 2 a GPU)")
      ->check(CLI::Range(1, 64));
  mmp_enc->add_option("--gpus", mmp_args.gpus,
                      "GPUs to encode on, as 'all' or numbers such as 0,1 (frames in flight go to them in turn; "
                      "the same bytes); default: the current GPU");
  mmp_enc
      ->add_option("--tile-mode", mmp_args.tile_mode,
                   "what tiles share: sync (dictionaries and models, updated in rounds: the fewest bits), "
                   "sync-dict (dictionaries only), independent (nothing)")
      ->check(CLI::IsMember({"sync", "sync-dict", "independent"}))
      ->capture_default_str();
  mmp_enc
      ->add_option("--tile-scan", mmp_args.tile_scan,
                   "the order of synchronized tiles' rounds: raster (round k codes each tile's block k) or "
                   "wavefront (each round codes every block whose left, top and top-right neighbours are done: "
                   "a 512x512 tile takes 94 rounds instead of 1024, about 0.09 dB; on the GPU the low-latency setting)")
      ->check(CLI::IsMember({"raster", "wavefront"}))
      ->capture_default_str();
  auto* mmp_dec = mmp_cmd->add_subcommand("decode", "decode an .mmp file to Y4M, images or one PNG");
  mmp_dec->add_option("input,-i,--input", mmp_args.input, ".mmp file")->required();
  mmp_dec->add_option("-o,--output", mmp_args.output,
                      "out.png (first frame), out.y4m, frames/%06d.png, a video file, '-' (Y4M stdout)");
  add_overwrite_flags(mmp_dec, &mmp_args.overwrite, &mmp_args.no_overwrite, "output file");
  auto* mmp_info = mmp_cmd->add_subcommand("info", "show an .mmp file's header and frame sizes");
  mmp_info->add_option("input,-i,--input", mmp_args.input, ".mmp file")->required();
  mmp_cmd->footer(
      "\nExample: vfpipe mmp encode photo.y4m -o photo.mmp --lambda 40 && vfpipe mmp decode photo.mmp -o back.png\n");
  out.push_back({mmp_enc, [args] { return mmp_encode_command(*args); }});
  out.push_back({mmp_dec, [args] { return mmp_decode_command(*args); }});
  out.push_back({mmp_info, [args] { return mmp_info_command(*args); }});
}

}  // namespace vfp
