// Convolution benchmark: vfpipe's CUDA convolution (2-D path with a non-separable kernel,
// and the separable path with a Gaussian) against NPP's nppiFilter32f_8u_C1R_Ctx in the
// same run (when built with NPP), on a random 8-bit gray plane, kernels 3x3..31x31, plus
// the memory floor: one read and one write of the frame at the device bandwidth measured
// in the same run (512 MiB device-to-device copy). vfpipe handles borders (reflect101) over
// the full frame; NPP filters the interior ROI only. The 2-D path is also timed without
// programmatic dependent launch (each call then pays the full launch gap, as NPP's do).
//
//   vfpipe-bench-conv [--sizes 1920x1080,3840x2160] [--kernels 3,5,7,9,15,31] [--iters 30] [--json f]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "apps/bench/bench_util.hpp"
#include "core/gpu.hpp"
#include "cpu/conv.hpp"
#include "cuda/conv.hpp"
#if VFPIPE_HAVE_NPP
#include <nppi_filtering_functions.h>
#endif

using namespace vfp;

int main(int argc, char** argv) {
  CLI::App app{"vfpipe convolution benchmark (CUDA, against NPP when available)"};
  std::string sizes = "1920x1080,3840x2160", kernels = "3,5,7,9,15,31", json_path;
  int iters = 30;
  app.add_option("--sizes", sizes, "frame sizes")->capture_default_str();
  app.add_option("--kernels", kernels, "square kernel sizes (odd, <= 31)")->capture_default_str();
  app.add_option("--iters", iters, "timed runs per case (median reported)")->capture_default_str();
  app.add_option("--json", json_path, "write results as JSON");
  CLI11_PARSE(app, argc, argv);
  try {
    if (!bench::require_gpu()) return 1;
    std::printf(
        "vfpipe convolution benchmark on %s (8-bit gray, ms per call = median of %d batches of 10 back-to-back "
        "calls)\n",
        cuda::probe().name.c_str(), iters);
#if !VFPIPE_HAVE_NPP
    std::printf("NPP: not available in this build\n");
#endif
    nlohmann::json out = nlohmann::json::array();
    cuda::Stream stream;
    for (const std::string& sz : bench::split_list(sizes)) {
      int w = 0, h = 0;
      if (std::sscanf(sz.c_str(), "%dx%d", &w, &h) != 2) throw std::runtime_error("bad size " + sz);
      const int pitch = static_cast<int>(align_up(static_cast<size_t>(w), kPitchAlign));
      const size_t bytes = static_cast<size_t>(pitch) * h;
      std::vector<uint8_t> host(bytes);
      std::mt19937 rng(1);
      for (auto& v : host) v = static_cast<uint8_t>(rng());
      cuda::DeviceBuffer d_in(bytes), d_out(bytes);
      cuda::memcpy_h2d_async(d_in.get(), host.data(), bytes, stream.get());
      // Memory floor: one read and one write of the frame at the device bandwidth.
      static const double gbps = bench::measure_bandwidth_gbps(stream);
      const double copy_ms = 2.0 * w * h / (gbps * 1e6);
      std::printf("%s: memory floor (read + write of the frame) %.4f ms\n", sz.c_str(), copy_ms);
      std::printf("%-7s %10s %12s %10s %10s %12s %10s %9s %9s %12s\n", "kernel", "2-D ms", "2-D noPDL ms", "sep ms",
                  "auto ms", "auto Mpix/s", "NPP ms", "NPP/2-D", "floor x", "noPDL floor x");
      for (const std::string& kt : bench::split_list(kernels)) {
        const int k = std::stoi(kt);
        // 2-D path: a non-separable kernel (random taps); separable: a Gaussian.
        ConvParams p2;
        {
          std::mt19937 kr(static_cast<uint32_t>(k));
          std::uniform_real_distribution<float> d(0.f, 1.f);
          std::string taps;
          for (int i = 0; i < k * k; ++i) taps += std::to_string(d(kr)) + " ";
          p2.kernel = conv_parse_taps(taps, k, k);
          p2.kernel.separable = false;
          p2.rdiv = static_cast<float>(1.0 / p2.kernel.sum());
        }
        ConvParams ps;
        ps.kernel = conv_preset("gauss", k, k, 0, 1, "x");
        ps.rdiv = static_cast<float>(1.0 / ps.kernel.sum());
        // Taps are uploaded once (as the stage does: only when they change); the kernel is timed.
        auto timed = [&](const ConvParams& p, bool sep) {
          cuda::ConvTaps taps(1);
          static uint64_t version = 0;
          taps.use(p, sep, ++version, 0, stream.get());
          return bench::time_ms(iters, stream,
                                [&] { taps.run(d_in.get(), pitch, d_out.get(), pitch, w, h, 0, stream.get()); });
        };
        const double t2 = timed(p2, false);
        // The same without programmatic dependent launch: each call waits for the previous
        // kernel's end before its blocks are scheduled (the launch gap is not hidden).
        cuda::conv_set_programmatic_launch(false);
        const double t2_plain = timed(p2, false);
        cuda::conv_set_programmatic_launch(true);
        const double tsep = timed(ps, true);
        // What the stage runs for a Gaussian of this size (separable from 7x7 up).
        const double tauto = k * k >= 49 ? tsep : timed(ps, false);
        double tnpp = 0;
#if VFPIPE_HAVE_NPP
        {
          const int r = k / 2;
          cuda::DeviceBuffer dk(static_cast<size_t>(k) * k * sizeof(float));
          std::vector<float> taps(p2.kernel.taps);
          for (auto& t : taps) t *= p2.rdiv;
          cuda::memcpy_h2d_async(dk.get(), taps.data(), dk.size(), stream.get());
          NppStreamContext ctx = bench::npp_context(stream.get());
          NppiSize roi{w - 2 * r, h - 2 * r}, ksz{k, k};
          NppiPoint anchor{r, r};
          NppStatus st = NPP_SUCCESS;
          const Npp8u* src = d_in.get() + static_cast<size_t>(r) * pitch + r;
          Npp8u* dst = d_out.get() + static_cast<size_t>(r) * pitch + r;
          tnpp = bench::time_ms(iters, stream, [&] {
            st = nppiFilter32f_8u_C1R_Ctx(src, pitch, dst, pitch, roi, reinterpret_cast<const Npp32f*>(dk.get()), ksz,
                                          anchor, ctx);
          });
          if (st != NPP_SUCCESS) throw std::runtime_error("nppiFilter32f_8u_C1R_Ctx failed: " + std::to_string(st));
        }
#endif
        const double mpix = static_cast<double>(w) * h / (tauto * 1e3);
        std::printf("%3dx%-3d %10.4f %12.4f %10.4f %10.4f %12.0f %10s %9s %8.2fx %11.2fx\n", k, k, t2, t2_plain, tsep,
                    tauto, mpix, tnpp > 0 ? std::to_string(tnpp).substr(0, 7).c_str() : "-",
                    tnpp > 0 ? (std::to_string(tnpp / t2).substr(0, 5) + "x").c_str() : "-", tauto / copy_ms,
                    t2_plain / copy_ms);
        std::fflush(stdout);
        out.push_back({{"size", sz},
                       {"kernel", k},
                       {"conv2d_ms", t2},
                       {"conv2d_no_pdl_ms", t2_plain},
                       {"separable_ms", tsep},
                       {"auto_gauss_ms", tauto},
                       {"auto_mpix_s", mpix},
                       {"npp_ms", tnpp},
                       {"npp_over_2d", tnpp > 0 ? tnpp / t2 : 0},
                       {"floor_ms", copy_ms},
                       {"copy_GBps", gbps},
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
