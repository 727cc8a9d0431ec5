// Median benchmark: vfpipe's CUDA median (both algorithms and the automatic choice) on a
// random 8-bit (or, with --depth 16, 16-bit) gray plane, every window from 3x3 to 101x101,
// and NPP's nppiFilterMedian_8u_C1R_Ctx (16u) in the same run when NPP is available (built
// with it on the GPU machine). Timing: CUDA events around each call, median of --iters runs after warm-up.
// vfpipe handles borders (replicate) over the full frame; NPP filters the interior ROI
// only (it has no border handling), so it does slightly less work.
//
//   vfpipe-bench-median [--sizes 1920x1080,3840x2160] [--windows 3,5,7,...] [--iters 20]
//                       [--npp-max 21] [--depth 8|16] [--json out.json]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <type_traits>

#include "apps/bench/bench_util.hpp"
#include "core/gpu.hpp"
#include "cuda/median.hpp"
#include "pipeline/stats.hpp"
#if VFPIPE_HAVE_NPP
#include <cuda_runtime.h>
#include <nppi_filtering_functions.h>
#endif

using namespace vfp;
#if VFPIPE_HAVE_NPP
using vfp::bench::npp_context;
#endif
using vfp::bench::time_ms;

namespace {

#if VFPIPE_HAVE_NPP
// The buffer-size out-parameter changed type across NPP versions; deduce it.
template <typename T>
struct ThirdArg;
template <typename R, typename A, typename B, typename C, typename D>
struct ThirdArg<R (*)(A, B, C, D)> {
  using type = std::remove_pointer_t<C>;
};

#endif

#if VFPIPE_HAVE_NPP
// NPP's median for the sample type: (buffer size, filter).
struct Npp8 {
  static constexpr auto size = &nppiFilterMedianGetBufferSize_8u_C1R_Ctx;
  static constexpr auto filter = &nppiFilterMedian_8u_C1R_Ctx;
};
struct Npp16 {
  static constexpr auto size = &nppiFilterMedianGetBufferSize_16u_C1R_Ctx;
  static constexpr auto filter = &nppiFilterMedian_16u_C1R_Ctx;
};
#endif

struct Settings {
  std::string sizes, windows;
  int iters = 20, npp_max = 21;
  std::string content = "random";
};

// A sample of the plane: "random" over the type's range, or "video": 10-bit video's
// samples (smooth shading and small noise, as a camera gives) at the type's depth.
template <typename T>
T content_sample(const std::string& content, int x, int y, std::mt19937& rng) {
  if (content == "random") return static_cast<T>(rng());
  const double shade = 512 + 300 * std::sin(x / 37.0) * std::cos(y / 23.0) + static_cast<int>(rng() % 17) - 8;
  const int v10 = std::clamp(static_cast<int>(shade), 0, 1023);
  return static_cast<T>(sizeof(T) == 1 ? v10 >> 2 : v10 * 64 + v10 / 16);
}

// Every size and window for samples of type T; rows appended to `out`.
template <typename T>
void bench_depth(const Settings& set, cuda::Stream& stream, nlohmann::json& out) {
  const int depth = 8 * static_cast<int>(sizeof(T));
  for (const std::string& sz : bench::split_list(set.sizes)) {
    int w = 0, h = 0;
    if (std::sscanf(sz.c_str(), "%dx%d", &w, &h) != 2) throw std::runtime_error("bad size " + sz);
    const int pitch = static_cast<int>(align_up(static_cast<size_t>(w) * sizeof(T), kPitchAlign));  // bytes
    const size_t row = static_cast<size_t>(pitch) / sizeof(T);
    std::vector<T> host(row * h);
    std::mt19937 rng(1);
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < static_cast<int>(row); ++x) host[y * row + x] = content_sample<T>(set.content, x, y, rng);
    const size_t bytes = host.size() * sizeof(T);
    cuda::DeviceBuffer d_in(bytes), d_out(bytes);
    cuda::memcpy_h2d_async(d_in.get(), host.data(), bytes, stream.get());
    stream.synchronize();
    const T* in = reinterpret_cast<const T*>(d_in.get());
    T* dev_out = reinterpret_cast<T*>(d_out.get());
    for (const std::string& wtok : bench::split_list(set.windows)) {
      const int win = std::stoi(wtok), r = win / 2;
      MedianParams p;
      p.radius = r;
      auto run = [&](cuda::MedianAlgo a) {
        return time_ms(set.iters, stream,
                       [&] { cuda::median_plane_async(in, pitch, dev_out, pitch, w, h, p, a, stream.get()); });
      };
      const bool sel_ok = cuda::median_select_supported(p);
      double t_sel = sel_ok ? run(cuda::MedianAlgo::Select) : 0;
      double t_hist = run(cuda::MedianAlgo::Histogram);
      double t_auto = cuda::median_auto_algo(p) == cuda::MedianAlgo::Select ? t_sel : t_hist;
      double t_npp = 0;
#if VFPIPE_HAVE_NPP
      using Npp = std::conditional_t<sizeof(T) == 1, Npp8, Npp16>;
      if (win <= set.npp_max && w > win && h > win) {
        NppStreamContext ctx = npp_context(stream.get());
        NppiSize roi{w - 2 * r, h - 2 * r}, mask{win, win};
        NppiPoint anchor{r, r};
        typename ThirdArg<std::remove_const_t<decltype(Npp::size)>>::type nbuf = 0;
        if (Npp::size(roi, mask, &nbuf, ctx) != NPP_SUCCESS)
          throw std::runtime_error("nppiFilterMedianGetBufferSize failed");
        cuda::DeviceBuffer buf(static_cast<size_t>(nbuf) + 1);
        const size_t offset = static_cast<size_t>(r) * pitch / sizeof(T) + r;  // samples
        NppStatus st = NPP_SUCCESS;
        t_npp = time_ms(set.iters, stream, [&] {
          st = Npp::filter(in + offset, pitch, dev_out + offset, pitch, roi, mask, anchor, buf.get(), ctx);
        });
        if (st != NPP_SUCCESS) throw std::runtime_error("nppiFilterMedian failed: " + std::to_string(st));
      }
#endif
      const double mpix = static_cast<double>(w) * h / (t_auto * 1e3);
      std::printf("%-10s %5d %4dx%-3d %10s %10.3f %10.3f %11.0f %10s %9s\n", sz.c_str(), depth, win, win,
                  sel_ok ? std::to_string(t_sel).substr(0, 6).c_str() : "-", t_hist, t_auto, mpix,
                  t_npp > 0 ? std::to_string(t_npp).substr(0, 7).c_str() : "-",
                  t_npp > 0 ? (std::to_string(t_npp / t_auto).substr(0, 5) + "x").c_str() : "-");
      std::fflush(stdout);
      out.push_back({{"size", sz},
                     {"depth", depth},
                     {"content", set.content},
                     {"window", win},
                     {"select_ms", t_sel},
                     {"histogram_ms", t_hist},
                     {"auto_ms", t_auto},
                     {"auto_mpix_s", mpix},
                     {"npp_ms", t_npp},
                     {"speedup_vs_npp", t_npp > 0 ? t_npp / t_auto : 0},
                     {"device", cuda::probe().name}});
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"vfpipe median benchmark (CUDA, against NPP when available)"};
  Settings set{"1920x1080,3840x2160", "3,5,7,9,11,15,21,31,41,51,75,101"};
  std::string json_path;
  int depth = 8;
  app.add_option("--sizes", set.sizes, "frame sizes")->capture_default_str();
  app.add_option("--windows", set.windows, "square window sizes (odd)")->capture_default_str();
  app.add_option("--iters", set.iters, "timed runs per case (median reported)")->capture_default_str();
  app.add_option("--npp-max", set.npp_max, "largest window to time NPP on (it is slow)")->capture_default_str();
  app.add_option("--depth", depth, "bits a sample: 8 or 16")->check(CLI::IsMember({8, 16}))->capture_default_str();
  app.add_option("--content", set.content, "random, or video (10-bit video's smooth shading and noise)")
      ->check(CLI::IsMember({"random", "video"}))
      ->capture_default_str();
  app.add_option("--json", json_path, "write results as JSON");
  CLI11_PARSE(app, argc, argv);
  try {
    if (!bench::require_gpu()) return 1;
    std::printf(
        "vfpipe median benchmark on %s (%d-bit gray, %s content; ms per call = median of %d batches of 10 "
        "back-to-back calls)\n",
        cuda::probe().name.c_str(), depth, set.content.c_str(), set.iters);
#if VFPIPE_HAVE_NPP
    std::printf("NPP: nppiFilterMedian_%s_C1R_Ctx on the interior ROI\n", depth == 8 ? "8u" : "16u");
#else
    std::printf("NPP: not available in this build\n");
#endif
    std::printf("%-10s %5s %7s %10s %10s %10s %11s %10s %9s\n", "size", "bits", "window", "select ms", "hist ms",
                "auto ms", "auto Mpix/s", "NPP ms", "vs NPP");
    nlohmann::json out = nlohmann::json::array();
    cuda::Stream stream;
    if (depth == 8)
      bench_depth<uint8_t>(set, stream, out);
    else
      bench_depth<uint16_t>(set, stream, out);
    if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
