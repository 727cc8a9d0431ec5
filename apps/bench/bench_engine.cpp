// Engine benchmark: pushes a synthetic stream (pre-rendered pinned frames, so the source
// costs nothing) through a pass-through chain into a null sink and reports frames/s, the
// achieved upload/download GB/s, and how close the engine gets to the copy-bound rate
// measured in the same run: one H2D and one D2H of a frame issued concurrently on two
// streams ("both ms", cache-hot buffers: the fastest the copy engines go), and the same
// cycling through as many host buffers as the engine uses ("rot ms").
//
//   vfpipe-bench-engine [--sizes 1920x1080,3840x2160] [--format bgr24] [--frames 600]
//                       [--depth 3] [--repeat 5] [--device cuda|cpu] [--json out.json]
//                       [--completion event|hostfunc] [--threads N] [--filters CHAIN]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"
#include "core/filter_parser.hpp"
#include "core/log.hpp"
#include "core/parallel.hpp"
#include "io/open.hpp"
#include "io/synthetic.hpp"
#include "pipeline/chain.hpp"
#include "pipeline/engine.hpp"
#if VFPIPE_HAVE_CUDA
#include "core/gpu.hpp"
#endif

using namespace vfp;

namespace {

struct CopyBound {
  double h2d_ms = 0, d2h_ms = 0, both_ms = 0;  // medians of single copies
  double stream_ms = 0;                        // per frame, streaming both directions back to back
};

#if VFPIPE_HAVE_CUDA
// Copies alone, cycling through `nbuf` pinned host buffers per direction. With nbuf = 1
// the same 25 MB stays hot in the CPU's last-level cache (DDIO), which flatters the copy
// engines; the engine cycles through its pools (cache + output frames), so the fair
// bound uses as many distinct buffers as the engine does.
CopyBound measure_copies(size_t bytes, int reps, int nbuf) {
  std::vector<void*> h_in(static_cast<size_t>(nbuf)), h_out(static_cast<size_t>(nbuf));
  for (int i = 0; i < nbuf; ++i) {
    h_in[static_cast<size_t>(i)] = cuda::host_alloc_pinned(bytes);
    h_out[static_cast<size_t>(i)] = cuda::host_alloc_pinned(bytes);
    std::memset(h_in[static_cast<size_t>(i)], i, bytes);
  }
  cuda::DeviceBuffer d_in(bytes), d_out(bytes);
  cuda::Stream s1, s2;
  cuda::Event a, b, c, d;
  std::vector<double> up, down, both;
  for (int i = 0; i < reps; ++i) {
    void* hi = h_in[static_cast<size_t>(i % nbuf)];
    void* ho = h_out[static_cast<size_t>(i % nbuf)];
    a.record(s1.get());
    cuda::memcpy_h2d_async(d_in.get(), hi, bytes, s1.get());
    b.record(s1.get());
    b.synchronize();
    up.push_back(cuda::Event::elapsed_ms(a, b));
    a.record(s1.get());
    cuda::memcpy_d2h_async(ho, d_out.get(), bytes, s1.get());
    b.record(s1.get());
    b.synchronize();
    down.push_back(cuda::Event::elapsed_ms(a, b));
    // Both directions at once on two streams: the copy-bound cost of one frame.
    hi = h_in[static_cast<size_t>((i + 1) % nbuf)];
    ho = h_out[static_cast<size_t>((i + 1) % nbuf)];
    a.record(s1.get());
    cuda::memcpy_h2d_async(d_in.get(), hi, bytes, s1.get());
    cuda::stream_wait(s2.get(), a);
    cuda::memcpy_d2h_async(ho, d_out.get(), bytes, s2.get());
    d.record(s2.get());
    b.record(s1.get());
    b.synchronize();
    d.synchronize();
    both.push_back(std::max(cuda::Event::elapsed_ms(a, b), cuda::Event::elapsed_ms(a, d)));
  }
  // A stream of copies, as the engine issues them: `reps` uploads on one stream and
  // `reps` downloads on another, no host synchronisation in between. Per-frame time of
  // this is the copy-bound rate of a video stream.
  a.record(s1.get());
  cuda::stream_wait(s2.get(), a);
  for (int i = 0; i < reps; ++i) {
    cuda::memcpy_h2d_async(d_in.get(), h_in[static_cast<size_t>(i % nbuf)], bytes, s1.get());
    cuda::memcpy_d2h_async(h_out[static_cast<size_t>(i % nbuf)], d_out.get(), bytes, s2.get());
  }
  b.record(s1.get());
  d.record(s2.get());
  b.synchronize();
  d.synchronize();
  double stream_ms = std::max(cuda::Event::elapsed_ms(a, b), cuda::Event::elapsed_ms(a, d)) / reps;
  for (int i = 0; i < nbuf; ++i) {
    cuda::host_free_pinned(h_in[static_cast<size_t>(i)]);
    cuda::host_free_pinned(h_out[static_cast<size_t>(i)]);
  }
  CopyBound r;
  r.stream_ms = stream_ms;
  r.h2d_ms = summarize(up).p50;
  r.d2h_ms = summarize(down).p50;
  r.both_ms = summarize(both).p50;
  return r;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"vfpipe engine benchmark: pass-through throughput and copy/compute overlap"};
  std::string sizes = "1920x1080,3840x2160", format = "bgr24", device = "cuda", json_path, filters = "null";
  int64_t frames = 600;
  int depth = 3, queue = 4, cache = 8, repeat = 5;
  app.add_option("--sizes", sizes, "comma-separated frame sizes")->capture_default_str();
  app.add_option("--format", format, "pixel format of the stream")->capture_default_str();
  app.add_option("--frames", frames, "frames per size")->capture_default_str();
  app.add_option("--depth", depth, "frames in flight")->capture_default_str();
  app.add_option("--queue", queue, "queue capacity")->capture_default_str();
  app.add_option("--repeat", repeat, "runs per size (the median is reported)")->capture_default_str();
  app.add_option("--cache", cache, "distinct pre-rendered source frames")->capture_default_str();
  app.add_option("--filters", filters, "chain to run")->capture_default_str();
  app.add_option("--device", device, "cuda or cpu")->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--json", json_path, "write results as JSON");
  std::string completion = "event";
  app.add_option("--completion", completion, "CUDA completion: event (cudaEventSynchronize) or hostfunc")
      ->check(CLI::IsMember({"event", "hostfunc"}))
      ->capture_default_str();
  int threads = 0;
  app.add_option("--threads", threads, "CPU pool size (0 = every core)")->capture_default_str();
  bool timing_overhead = false;
  app.add_flag("--timing-overhead", timing_overhead,
               "also run every repeat without per-frame timing (no step events, no records) and report "
               "what the timing and profiling records cost");
  CLI11_PARSE(app, argc, argv);

  try {
    set_cpu_threads(threads);
    Backend backend = device == "cuda" ? Backend::CUDA : Backend::CPU;
#if VFPIPE_HAVE_CUDA
    if (backend == Backend::CUDA && !cuda::probe().usable) {
      std::fprintf(stderr, "no usable GPU (%s); use --device cpu\n", cuda::probe().reason.c_str());
      return 1;
    }
    std::string devname = backend == Backend::CUDA ? cuda::probe().name : "CPU";
#else
    if (backend == Backend::CUDA) {
      std::fprintf(stderr, "built without CUDA; use --device cpu\n");
      return 1;
    }
    std::string devname = "CPU";
#endif
    nlohmann::json out = nlohmann::json::array();
    std::printf(
        "vfpipe engine benchmark on %s: %s, chain '%s', depth %d, %lld frames per size, completion %s, "
        "%d CPU threads\n",
        devname.c_str(), format.c_str(), filters.c_str(), depth, static_cast<long long>(frames), completion.c_str(),
        cpu_threads());
    std::printf("%-10s %9s %9s %9s %9s %9s %9s %9s %9s %9s %8s\n", "size", "fps", "up GB/s", "down GB/s", "H2D ms",
                "D2H ms", "both ms", "rot ms", "stream ms", "bound fps", "of bound");
    std::stringstream ss(sizes);
    std::string sz;
    while (std::getline(ss, sz, ',')) {
      // Single runs on a shared VM vary by +-10%, so every figure is the
      // median of `repeat` runs, with copies-alone measured between engine runs.
      std::vector<double> fps_runs, both_runs, hot_runs, h2d_runs, d2h_runs, stream_runs, untimed_runs;
      RunReport rep;
      FrameSpec spec;
      auto run_once = [&](bool timing) {
        SyntheticParams p = parse_synthetic("synthetic=size=" + sz + ":format=" + format);
        p.frames = frames;
        p.cache = cache;
        p.pinned = backend == Backend::CUDA;
        SyntheticSource src(p);
        spec = src.spec();
        NullSink sink;
        Chain chain = Chain::build(build_stages(filters), src.spec(), {}, std::nullopt);
        sink.open(chain.output());
        EngineConfig cfg;
        cfg.backend = backend;
        cfg.depth = depth;
        cfg.queue = queue;
        cfg.warmup = 10;
        cfg.timing = timing;
        cfg.completion = completion == "hostfunc" ? Completion::HostFunc : Completion::Event;
        RunResult r = run_pipeline(src, chain, sink, cfg);
        if (r.error) std::rethrow_exception(r.error);
        return r.report;
      };
      for (int rpt = 0; rpt < repeat; ++rpt) {
        // Alternating timed and untimed runs, so that the shared machine's drift hits both.
        if (timing_overhead) untimed_runs.push_back(run_once(false).fps());
        rep = run_once(true);
        fps_runs.push_back(rep.fps());
#if VFPIPE_HAVE_CUDA
        if (backend == Backend::CUDA) {
          size_t bytes = FrameLayout::of(spec).total_bytes;
          CopyBound hot = measure_copies(bytes, 20, 1);
          CopyBound rot = measure_copies(bytes, 40, cache + depth + queue + 2);
          hot_runs.push_back(hot.both_ms);
          both_runs.push_back(rot.both_ms);
          stream_runs.push_back(rot.stream_ms);
          h2d_runs.push_back(hot.h2d_ms);
          d2h_runs.push_back(hot.d2h_ms);
        }
#endif
      }
      Summary fs = summarize(fps_runs);
      double fps = fs.p50;
      double up = rep.bytes_up * fps / 1e9, down = rep.bytes_down * fps / 1e9;
      CopyBound cb;
      cb.h2d_ms = summarize(h2d_runs).p50;
      cb.d2h_ms = summarize(d2h_runs).p50;
      cb.both_ms = summarize(hot_runs).p50;
      double rot_ms = summarize(both_runs).p50;
      cb.stream_ms = summarize(stream_runs).p50;
      // The bound: copies alone streaming both directions at once (uploads back to back on
      // one stream, downloads on another), through as many host buffers as the engine.
      double bound_fps = cb.stream_ms > 0 ? 1000.0 / cb.stream_ms : 0;
      nlohmann::json j = {{"size", sz},
                          {"format", format},
                          {"frames", rep.frames_out},
                          {"fps", fps},
                          {"fps_min", fs.min},
                          {"fps_max", fs.max},
                          {"repeat", repeat},
                          {"up_GBps", up},
                          {"down_GBps", down},
                          {"device", devname},
                          {"depth", depth},
                          {"filters", filters},
                          {"bytes_per_frame", rep.bytes_up},
                          {"completion", completion},
                          {"cpu_threads", cpu_threads()}};
      j["copy_h2d_ms"] = cb.h2d_ms;
      j["copy_d2h_ms"] = cb.d2h_ms;
      j["copy_both_hot_ms"] = cb.both_ms;
      j["copy_both_rotating_ms"] = rot_ms;
      j["copy_stream_ms"] = cb.stream_ms;
      j["hot_bound_fps"] = cb.both_ms > 0 ? 1000.0 / cb.both_ms : 0;
      j["copy_bound_fps"] = bound_fps;
      j["fraction_of_bound"] = bound_fps > 0 ? fps / bound_fps : 0;
      if (timing_overhead) {
        const double untimed = summarize(untimed_runs).p50;
        j["fps_untimed"] = untimed;
        j["timing_overhead"] = untimed > 0 ? 1.0 - fps / untimed : 0;
        std::printf("%-10s timing overhead: %.1f fps timed vs %.1f fps untimed (medians of %d): %+.2f%%\n", sz.c_str(),
                    fps, untimed, repeat, untimed > 0 ? 100.0 * (1.0 - fps / untimed) : 0.0);
      }
      j["steps"] = nlohmann::json::array();
      for (size_t i = 0; i < rep.steps.size(); ++i) {
        Summary st = rep.step_summary(i);
        j["steps"].push_back({{"name", rep.steps[i]}, {"mean_ms", st.mean}, {"p50_ms", st.p50}, {"p99_ms", st.p99}});
      }
      out.push_back(j);
      std::printf("%-10s %9.1f %9.2f %9.2f %9.3f %9.3f %9.3f %9.3f %9.3f %9.1f %7.1f%%  (fps %.0f..%.0f)\n", sz.c_str(),
                  fps, up, down, cb.h2d_ms, cb.d2h_ms, cb.both_ms, rot_ms, cb.stream_ms, bound_fps,
                  bound_fps > 0 ? 100.0 * fps / bound_fps : 0.0, fs.min, fs.max);
    }
    if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  } catch (const ParseError& e) {
    std::fprintf(stderr, "error: %s\n", e.pretty().c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
