// DEFLATE benchmark: the CUDA encoder's throughput and ratio per level on video frames,
// against zlib and libdeflate on this machine's CPU cores (one thread on the whole input,
// and N threads on independent 1 MiB pieces, as pigz-style tools do), and PNG encoding of
// frames on the GPU against libpng's default output. Peers are compiled in where found.
//
//   vfpipe-bench-deflate [--size 3840x2160] [--format bgr24] [--frames 8] [--levels 1,2,4,6,9]
//                        [--threads 16] [--png-levels 1,2,4,6] [--json f]
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "apps/bench/bench_util.hpp"
#include "codecs/deflate/deflate.hpp"
#include "codecs/deflate/png.hpp"
#include "cuda/deflate.hpp"
#include "io/synthetic.hpp"
#include "pipeline/stats.hpp"
#if VFPIPE_HAVE_ZLIB
#include <zlib.h>
#endif
#if VFPIPE_HAVE_LIBDEFLATE
#include <libdeflate.h>
#endif
#if VFPIPE_HAVE_LIBPNG
#include <png.h>
#endif

using namespace vfp;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

template <typename F>
double median_s(int reps, F&& f) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const double a = now_s();
    f();
    t.push_back(now_s() - a);
  }
  return summarize(t).p50;
}

std::vector<int> ints(const std::string& s) {
  std::vector<int> v;
  for (const std::string& t : bench::split_list(s)) v.push_back(std::stoi(t));
  return v;
}

// Compresses `data` in independent 1 MiB pieces on `threads` threads; returns total bytes.
template <typename F>
size_t parallel_pieces(const std::vector<uint8_t>& data, int threads, F&& one) {
  const size_t piece = size_t(1) << 20, n = (data.size() + piece - 1) / piece;
  std::vector<size_t> out(n, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (size_t i = static_cast<size_t>(t); i < n; i += static_cast<size_t>(threads))
        out[i] = one(data.data() + i * piece, std::min(piece, data.size() - i * piece));
    });
  for (auto& th : pool) th.join();
  size_t total = 0;
  for (size_t v : out) total += v;
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"vfpipe DEFLATE benchmark (CUDA encoder vs zlib / libdeflate, PNG vs libpng)"};
  std::string size = "3840x2160", format = "bgr24", levels_s = "1,2,4,6,9", png_levels_s = "1,2,4,6", json_path;
  int frames = 8, threads = static_cast<int>(std::thread::hardware_concurrency()), reps = 5;
  double sigma = 2;
  app.add_option("--size", size, "frame size")->capture_default_str();
  app.add_option("--format", format, "frame format (gray, bgr24, yuv420p)")->capture_default_str();
  app.add_option("--frames", frames, "frames in the input (compressed as one stream)")->capture_default_str();
  app.add_option("--sigma", sigma, "sensor-like Gaussian noise of the synthetic frames")->capture_default_str();
  app.add_option("--levels", levels_s, "GPU levels")->capture_default_str();
  app.add_option("--png-levels", png_levels_s, "GPU PNG levels")->capture_default_str();
  app.add_option("--threads", threads, "CPU threads for the parallel peers")->capture_default_str();
  app.add_option("--reps", reps, "repetitions (median)")->capture_default_str();
  app.add_option("--json", json_path, "write the results as JSON");
  CLI11_PARSE(app, argc, argv);
  if (!bench::require_gpu()) return 1;

  SyntheticParams sp =
      parse_synthetic("size=" + size + ":format=" + format + ":noise=gauss:sigma=" + std::to_string(sigma));
  SyntheticSource src(sp);
  HostFrame f(sp.spec, false);
  const size_t fbytes = static_cast<size_t>(f.layout().total_bytes);
  std::vector<uint8_t> data;
  for (int i = 0; i < frames; ++i) {
    src.render(i * 7, f);
    const size_t at = data.size();
    data.resize(at + fbytes);
    f.store_packed(data.data() + at);
  }
  data.resize(data.size() / frames * frames);
  const size_t n = data.size();
  std::printf("input: %d synthetic %s %s frames (gauss noise sigma %.1f), %.1f MB; %d CPU threads\n", frames,
              size.c_str(), format.c_str(), sigma, n / 1e6, threads);
  nlohmann::json J;
  J["device"] = cuda::probe().name;
  J["input"] = {{"frames", frames}, {"size", size}, {"format", format}, {"sigma", sigma}, {"bytes", n}};

  cuda::Stream s;
  cuda::DeviceBuffer din(n);
  cuda::memcpy_h2d_async(din.get(), data.data(), n, s.get());
  s.synchronize();
  cuda::DeflateEncoder enc;
  std::printf("\n%-26s %10s %9s %9s   %s\n", "encoder", "GB/s", "ratio", "ms", "parts (ms)");
  auto row = [&](const std::string& name, double sec, size_t z, const std::string& extra = "") {
    std::printf("%-26s %10.2f %9.3f %9.2f   %s\n", name.c_str(), n / sec / 1e9, double(n) / z, sec * 1e3,
                extra.c_str());
    J["rows"].push_back(
        {{"encoder", name}, {"gbps", n / sec / 1e9}, {"ratio", double(n) / z}, {"ms", sec * 1e3}, {"bytes", z}});
  };
  for (int level : ints(levels_s)) {
    deflate::Options o;
    o.level = level;
    size_t z = 0;
    enc.compress_device(din.get(), n, o, cuda::DeflateContainer::Zlib, s.get());  // warm-up, sizes buffers
    const double t =
        median_s(reps, [&] { z = enc.compress_device(din.get(), n, o, cuda::DeflateContainer::Zlib, s.get()); });
    const auto& tm = enc.timings();
    char parts[160];
    std::snprintf(parts, sizeof parts, "chains %.2f parse %.2f codes %.2f pack %.2f adler %.2f", tm.chains, tm.parse,
                  tm.codes, tm.pack, tm.checksum);
#if VFPIPE_HAVE_ZLIB
    {  // every measured stream is checked by zlib
      std::vector<uint8_t> zs(z), back(n);
      cuda::memcpy_d2h_async(zs.data(), enc.output(), z, s.get());
      s.synchronize();
      uLongf bn = n;
      if (uncompress(back.data(), &bn, zs.data(), z) != Z_OK || bn != n || back != data) {
        std::fprintf(stderr, "level %d: zlib could not read the GPU stream back\n", level);
        return 1;
      }
    }
#endif
    row("vfpipe GPU level " + std::to_string(level), t, z, parts);
  }
#if VFPIPE_HAVE_ZLIB
  for (int level : {1, 6}) {
    uLongf zn = compressBound(n);
    std::vector<uint8_t> z(zn);
    const double t = median_s(1, [&] {
      zn = compressBound(n);
      compress2(z.data(), &zn, data.data(), n, level);
    });
    row("zlib -" + std::to_string(level) + " (1 thread)", t, zn);
    size_t zt = 0;
    const double tp = median_s(1, [&] {
      zt = parallel_pieces(data, threads, [&](const uint8_t* p, size_t k) {
        uLongf m = compressBound(k);
        std::vector<uint8_t> b(m);
        compress2(b.data(), &m, p, k, level);
        return static_cast<size_t>(m);
      });
    });
    row("zlib -" + std::to_string(level) + " (" + std::to_string(threads) + " thr, 1 MiB)", tp, zt);
  }
#endif
#if VFPIPE_HAVE_LIBDEFLATE
  for (int level : {1, 6}) {
    libdeflate_compressor* c = libdeflate_alloc_compressor(level);
    std::vector<uint8_t> z(libdeflate_zlib_compress_bound(c, n));
    size_t zn = 0;
    const double t = median_s(1, [&] { zn = libdeflate_zlib_compress(c, data.data(), n, z.data(), z.size()); });
    libdeflate_free_compressor(c);
    row("libdeflate -" + std::to_string(level) + " (1 thread)", t, zn);
    size_t zt = 0;
    const double tp = median_s(3, [&] {
      zt = parallel_pieces(data, threads, [&](const uint8_t* p, size_t k) {
        libdeflate_compressor* cc = libdeflate_alloc_compressor(level);
        std::vector<uint8_t> b(libdeflate_zlib_compress_bound(cc, k));
        const size_t m = libdeflate_zlib_compress(cc, p, k, b.data(), b.size());
        libdeflate_free_compressor(cc);
        return m;
      });
    });
    row("libdeflate -" + std::to_string(level) + " (" + std::to_string(threads) + " thr, 1 MiB)", tp, zt);
  }
#endif

  // PNG of one frame (bgr24 -> RGB, gray -> gray), resident on the device.
  if (format == "bgr24" || format == "gray") {
    const int ch = format == "bgr24" ? 3 : 1;
    const int w = sp.spec.width, h = sp.spec.height;
    const size_t pitch = static_cast<size_t>(w) * ch;
    std::printf("\nPNG of one %dx%d %s frame\n%-26s %10s %12s %9s\n", w, h, ch == 3 ? "RGB" : "gray", "encoder",
                "frames/s", "bytes", "vs libpng");
    size_t png_ref = 0;
#if VFPIPE_HAVE_LIBPNG
    {
      png_image img{};
      img.version = PNG_IMAGE_VERSION;
      img.width = static_cast<png_uint_32>(w);
      img.height = static_cast<png_uint_32>(h);
      img.format = ch == 3 ? PNG_FORMAT_BGR : PNG_FORMAT_GRAY;
      png_alloc_size_t len = 0;
      png_image_write_to_memory(&img, nullptr, &len, 0, data.data(), static_cast<png_int_32>(pitch), nullptr);
      std::vector<uint8_t> mem(len);
      const double t = median_s(3, [&] {
        png_alloc_size_t l2 = len;
        png_image_write_to_memory(&img, mem.data(), &l2, 0, data.data(), static_cast<png_int_32>(pitch), nullptr);
        png_ref = l2;
      });
      std::printf("%-26s %10.1f %12zu %9s\n", "libpng default (1 thread)", 1 / t, png_ref, "1.000");
      J["png"].push_back({{"encoder", "libpng default"}, {"fps", 1 / t}, {"bytes", png_ref}});
    }
#endif
    for (int level : ints(png_levels_s)) {
      cuda::DeflateEncoder::HostBytes png{};
      enc.encode_png_pinned(din.get(), pitch, w, h, ch, ch == 3, level, s.get());
      const double t = median_s(std::max(reps, 10), [&] {
        png = enc.encode_png_pinned(din.get(), pitch, w, h, ch, ch == 3, level, s.get());
      });
      const std::string name = "vfpipe GPU PNG level " + std::to_string(level);
      std::printf("%-26s %10.1f %12zu %9.3f\n", name.c_str(), 1 / t, png.size,
                  png_ref ? double(png.size) / png_ref : 0.0);
      J["png"].push_back({{"encoder", name}, {"fps", 1 / t}, {"bytes", png.size}});
    }
  }
  if (!json_path.empty()) std::ofstream(json_path) << J.dump(2) << "\n";
  return 0;
}
