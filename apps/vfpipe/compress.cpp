// `vfpipe compress`: vfpipe's DEFLATE encoder (or libdeflate) on a file.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "apps/vfpipe/cli.hpp"
#include "codecs/deflate/deflate.hpp"
#include "core/error.hpp"
#include "core/frame.hpp"
#include "core/log.hpp"
#include "io/lossless.hpp"
#include "io/open.hpp"
#if VFPIPE_HAVE_CUDA
#include "core/gpu.hpp"
#endif

namespace vfp {
namespace {

struct CompressArgs {
  std::string input, output, format = "gzip", device = "auto", engine = "auto";
  int level = 6;
  int segment_kib = 64;
  bool overwrite = false, no_overwrite = false;  // -y, -n
};

// `vfpipe compress`: our DEFLATE encoder on a file (testing, comparison with gzip/zlib).
// Bounded memory: gzip output is written as it goes, one gzip member per chunk of the input
// (gzip -d and zlib's gunzip read concatenated members as one stream); zlib and raw streams
// are one stream, so their input is read whole, after checking that it fits in memory.
constexpr size_t kChunkBytes = size_t{32} << 20;

int compress_command(const CompressArgs& a) {
  std::error_code ec;
  if (std::filesystem::is_directory(a.input, ec)) throw Error(ErrorKind::Input, "'" + a.input + "' is a directory");
  std::ifstream in(a.input, std::ios::binary);
  if (!in) throw Error(ErrorKind::Input, "cannot open '" + a.input + "'");
  const DeflateFormat fmt = a.format == "zlib"  ? DeflateFormat::Zlib
                            : a.format == "raw" ? DeflateFormat::Raw
                                                : DeflateFormat::Gzip;
  const bool chunked = fmt == DeflateFormat::Gzip;
  if (!chunked) {  // one stream: the input and the output in memory at once, plus the encoder's work
    const auto size = std::filesystem::file_size(a.input, ec);
    if (!ec)
      check_host_memory(static_cast<size_t>(size) * 3, "compressing '" + a.input + "' as one " + a.format + " stream");
  }
  deflate::Options o;
  o.level = a.level;
  o.segment_bytes = static_cast<size_t>(a.segment_kib) * 1024;
  LosslessEncoder enc(a.level, a.device != "cpu" && a.engine != "libdeflate", a.engine == "vfpipe");
#if VFPIPE_HAVE_CUDA
  if (a.device == "cuda" && !enc.on_gpu())
    log::warn("no usable GPU (%s): compressing on the CPU", cuda::probe().reason.c_str());
#endif
  const std::string out = !a.output.empty() ? a.output
                                            : a.input + (a.format == "zlib"  ? ".zz"
                                                         : a.format == "raw" ? ".deflate"
                                                                             : ".gz");
  check_output_is_not_input(a.input, out);
  check_overwrite(out, overwrite_rule(a.overwrite, a.no_overwrite));
  std::ofstream os(out, std::ios::binary | std::ios::trunc);
  if (!os) throw Error(ErrorKind::Output, "cannot write output '" + out + "'");
  const auto t0 = std::chrono::steady_clock::now();
  size_t n_in = 0, n_out = 0;
  std::vector<uint8_t> buf;
  try {
    while (true) {
      if (chunked) {
        buf.resize(kChunkBytes);
        in.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
        buf.resize(static_cast<size_t>(in.gcount()));
      } else {
        buf.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      }
      if (in.bad()) throw Error(ErrorKind::Input, "cannot read '" + a.input + "'");
      if (buf.empty() && n_in > 0) break;  // an empty input still gets one (empty) stream
      const std::vector<uint8_t> z = enc.compress(buf.data(), buf.size(), o, fmt);
      os.write(reinterpret_cast<const char*>(z.data()), static_cast<std::streamsize>(z.size()));
      if (!os) throw Error(ErrorKind::Output, "cannot write to '" + out + "' (disk full?)");
      n_in += buf.size();
      n_out += z.size();
      if (!chunked || buf.size() < kChunkBytes) break;
    }
    os.close();
    if (!os) throw Error(ErrorKind::Output, "cannot write to '" + out + "' (disk full?)");
  } catch (...) {
    os.close();
    std::filesystem::remove(out, ec);  // no incomplete stream under the output's name
    throw;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr,
               "%s: %zu -> %zu bytes (%.2f%%, ratio %.3f) in %.3f s, %.1f MB/s, level %d, %s, %d KiB segments, %s\n",
               out.c_str(), n_in, n_out, n_in == 0 ? 0.0 : 100.0 * n_out / n_in,
               n_out == 0 ? 0.0 : static_cast<double>(n_in) / n_out, s, n_in / 1e6 / std::max(s, 1e-9), a.level,
               a.format.c_str(), a.segment_kib, enc.engine());
  return 0;
}

}  // namespace

void add_compress_command(CLI::App& app, Subcommands& out) {
  auto args = std::make_shared<CompressArgs>();
  CompressArgs& comp_args = *args;
  auto* compress = app.add_subcommand("compress", "compress a file with vfpipe's DEFLATE encoder (gzip, zlib or raw)");
  compress->add_option("input,-i,--input", comp_args.input, "file to compress")->required();
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
  compress
      ->add_option("--engine", comp_args.engine,
                   "auto (vfpipe's GPU encoder, else libdeflate), vfpipe (its GPU encoder or CPU reference: the "
                   "same bytes everywhere), libdeflate")
      ->check(CLI::IsMember({"auto", "vfpipe", "libdeflate"}))
      ->capture_default_str();
  add_overwrite_flags(compress, &comp_args.overwrite, &comp_args.no_overwrite, "output file");
  compress->add_option("--segment", comp_args.segment_kib, "segment size in KiB (4..64, the GPU's unit of work)")
      ->check(CLI::Range(4, 64))
      ->capture_default_str();
  compress->footer(
      "\nvfpipe's DEFLATE encoder (docs/deflate.md): on the GPU when one is usable, else its CPU\n"
      "reference; both write the same bytes, which any gzip/zlib reads.\n"
      "Example: vfpipe compress frames.raw --level 1 && gzip -t frames.raw.gz\n");
  out.push_back({compress, [args] { return compress_command(*args); }});
}

}  // namespace vfp
