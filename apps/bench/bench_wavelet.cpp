// Wavelet denoising benchmark: the CUDA denoise of one 8-bit plane split into its parts
// (forward DWT, noise estimate + thresholds, inverse DWT with the shrinkage fused in), the
// whole denoise, the CPU reference for the same work, and the memory floor: the bytes each
// part must move at the device bandwidth measured in the same run (512 MiB copy).
//
//   vfpipe-bench-wavelet [--sizes 3840x2160,1920x1080] [--wavelets db4,haar,sym8,cdf97]
//                        [--levels 3] [--method bayesshrink] [--bits 8|16] [--iters 30] [--cpu-iters 1] [--json f]
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "apps/bench/bench_util.hpp"
#include "core/gpu.hpp"
#include "cpu/wavelet.hpp"
#include "cuda/wavelet.hpp"
#include "stages/planar.hpp"

using namespace vfp;

int main(int argc, char** argv) {
  CLI::App app{"vfpipe wavelet denoising benchmark (CUDA parts, CPU reference, memory floor)"};
  std::string sizes = "3840x2160,1920x1080", wavelets = "db4,haar,sym8,cdf97", method = "bayesshrink", json_path;
  int iters = 30, cpu_iters = 1, levels = 3, bits = 8;
  app.add_option("--sizes", sizes, "plane sizes")->capture_default_str();
  app.add_option("--wavelets", wavelets, "wavelets")->capture_default_str();
  app.add_option("--levels", levels, "decomposition levels")->capture_default_str();
  app.add_option("--method", method, "bayesshrink | visushrink")->capture_default_str();
  app.add_option("--bits", bits, "sample depth of the plane: 8 or 16 (gray16le)")
      ->check(CLI::IsMember({8, 16}))
      ->capture_default_str();
  app.add_option("--iters", iters, "timed GPU runs per case (median reported)")->capture_default_str();
  app.add_option("--cpu-iters", cpu_iters, "CPU reference runs per case (0 = skip)")->capture_default_str();
  app.add_option("--json", json_path, "write results as JSON");
  CLI11_PARSE(app, argc, argv);
  try {
    if (!bench::require_gpu()) return 1;
    std::printf(
        "vfpipe wavelet benchmark on %s: %d levels, %s soft, %d-bit gray plane with Gaussian noise "
        "(sigma 20); ms per call = median of %d batches of 10\n",
        cuda::probe().name.c_str(), levels, method.c_str(), bits, iters);
    const int sb = bits / 8;  // bytes per sample
    cuda::Stream stream;
    const double gbps = bench::measure_bandwidth_gbps(stream);
    nlohmann::json out = nlohmann::json::array();
    std::printf("%-10s %-6s %9s %9s %9s %9s %9s %9s %8s %10s\n", "size", "wave", "fwd ms", "est ms", "inv ms",
                "total ms", "floor ms", "x floor", "Mpix/s", "CPU ms");
    for (const auto& sz : bench::split_list(sizes)) {
      int w = 0, h = 0;
      if (std::sscanf(sz.c_str(), "%dx%d", &w, &h) != 2) throw std::runtime_error("bad size " + sz);
      const int pitch = static_cast<int>(align_up(static_cast<size_t>(w) * sb, kPitchAlign));  // bytes
      const size_t bytes = static_cast<size_t>(pitch) * h;
      // A smooth pattern plus Gaussian noise: realistic coefficient statistics.
      std::vector<uint8_t> host(bytes);
      cuda::DeviceBuffer d_in(bytes), d_out(bytes);
      std::mt19937 rng(1);
      std::normal_distribution<float> noise(0.f, 20.f);
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) {
          const float v = 128.f + 60.f * std::sin(x * 0.01f) * std::cos(y * 0.013f) + noise(rng);
          const auto q = static_cast<uint8_t>(std::lround(std::fmin(255.f, std::fmax(0.f, v))));
          if (sb == 2)
            reinterpret_cast<uint16_t*>(host.data() + static_cast<size_t>(y) * pitch)[x] =
                static_cast<uint16_t>(q * 257);
          else
            host[static_cast<size_t>(y) * pitch + x] = q;
        }
      cuda::memcpy_h2d_async(d_in.get(), host.data(), bytes, stream.get());
      for (const auto& wn : bench::split_list(wavelets)) {
        WaveletParams p;
        p.wavelet = find_wavelet(wn);
        if (!p.wavelet) throw std::runtime_error("unknown wavelet " + wn);
        p.method = method == "visushrink" ? ShrinkMethod::VisuShrink : ShrinkMethod::BayesShrink;
        p.levels = levels;
        const int lv = p.levels_for(w, h);
        cuda::WaveletWorkspace ws;
        const bool sums = p.method == ShrinkMethod::BayesShrink;
        const bool deep = sb == 2;
        auto fwd = [&] {
          with_samples(deep, d_in.get(), d_out.get(), [&](auto in, auto) {
            ws.forward(in, pitch, w, h, *p.wavelet, p.boundary, lv, sums, stream.get());
          });
        };
        const double t_fwd = bench::time_ms(iters, stream, fwd);
        const double t_est = bench::time_ms(iters, stream, [&] { ws.estimate(p, stream.get()); });
        // The inverse consumes the approximation band it overwrites: re-run forward, time both, subtract.
        const double t_fi = bench::time_ms(iters, stream, [&] {
          fwd();
          with_samples(deep, d_in.get(), d_out.get(),
                       [&](auto, auto out) { ws.inverse(out, pitch, p, true, stream.get()); });
        });
        const double t_inv = t_fi - t_fwd;
        const double t_all = bench::time_ms(iters, stream, [&] {
          with_samples(deep, d_in.get(), d_out.get(),
                       [&](auto in, auto out) { ws.denoise(in, pitch, out, pitch, w, h, p, lv, stream.get()); });
        });
        // Bytes the parts must move: forward reads each level's input and writes its four
        // subbands; the estimate reads dd1 three times; the inverse reads the subbands and
        // writes each level's output (8- or 16-bit samples at the finest level).
        double b_fwd = 0, b_inv = 0;
        for (size_t l = 0; l < ws.geometry().size(); ++l) {
          const DwtLevel& g = ws.geometry()[l];
          const double in = static_cast<double>(g.w) * g.h * (l == 0 ? sb : 4);
          const double sub = 4.0 * g.cw * g.ch * 4;
          b_fwd += in + sub;
          b_inv += sub + in;
        }
        const double b_est = 3.0 * 4 * ws.geometry()[0].cw * ws.geometry()[0].ch;
        const double floor_ms = (b_fwd + b_inv + b_est) / (gbps * 1e6);
        double t_cpu = 0;
        if (cpu_iters > 0) {
          std::vector<uint8_t> cpu_out(bytes);
          const auto t0 = std::chrono::steady_clock::now();
          for (int i = 0; i < cpu_iters; ++i)
            with_samples(deep, host.data(), cpu_out.data(),
                         [&](auto in, auto out) { wavelet_denoise_plane_cpu(in, pitch, out, pitch, w, h, p); });
          t_cpu = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / cpu_iters;
        }
        const double mpix = static_cast<double>(w) * h / (t_all * 1e3);
        std::printf("%-10s %-6s %9.4f %9.4f %9.4f %9.4f %9.4f %8.2fx %8.0f %10.1f\n", sz.c_str(), wn.c_str(), t_fwd,
                    t_est, t_inv, t_all, floor_ms, t_all / floor_ms, mpix, t_cpu);
        std::fflush(stdout);
        out.push_back({{"size", sz},
                       {"wavelet", wn},
                       {"levels", lv},
                       {"method", method},
                       {"bits", bits},
                       {"forward_ms", t_fwd},
                       {"estimate_ms", t_est},
                       {"inverse_ms", t_inv},
                       {"total_ms", t_all},
                       {"bytes_forward", b_fwd},
                       {"bytes_estimate", b_est},
                       {"bytes_inverse", b_inv},
                       {"floor_ms", floor_ms},
                       {"copy_GBps", gbps},
                       {"mpix_s", mpix},
                       {"cpu_ms", t_cpu},
                       {"device", cuda::probe().name}});
      }
    }
    if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
