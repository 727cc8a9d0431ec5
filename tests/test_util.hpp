// Helpers shared by the tests: random frames, an in-memory source and a capturing sink,
// and running the vfpipe binary.
#pragma once
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "core/filter_parser.hpp"
#include "core/frame.hpp"
#include "io/synthetic.hpp"
#include "pipeline/engine.hpp"
#include "pipeline/source.hpp"
#include "pipeline/stats.hpp"

// Built with AddressSanitizer (the asan preset): timing tests and address-space limits
// do not apply there.
#if defined(__SANITIZE_ADDRESS__)
#define VFPIPE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define VFPIPE_ASAN 1
#endif
#endif
#ifndef VFPIPE_ASAN
#define VFPIPE_ASAN 0
#endif

namespace vfp::test {

// The message of a run's error (RunResult::error) when it is a vfp::Error; "" otherwise,
// so that a check on the message also fails for any other kind of failure.
inline std::string error_text(const std::exception_ptr& e) {
  try {
    if (e) std::rethrow_exception(e);
  } catch (const Error& err) {
    return err.what();
  } catch (...) {
  }
  return "";
}

inline void fill_random(HostFrame& f, uint32_t seed) {
  std::mt19937 rng(seed);
  ImageView v = f.view();
  int bpp = sample_bytes(v.format);
  for (int p = 0; p < plane_count(v.format); ++p)
    for (int y = 0; y < v.ph[p]; ++y)
      for (int x = 0; x < v.pw[p] * bpp; ++x) v.row(p, y)[x] = static_cast<uint8_t>(rng());
}

// Writes the frame number into the first bytes of plane 0 (for order checks).
inline void stamp(HostFrame& f, uint32_t n) {
  ImageView v = f.view();
  int bytes = v.pw[0] * (sample_bytes(v.format));
  for (int i = 0; i < 4 && i < bytes; ++i) v.row(0, 0)[i] = static_cast<uint8_t>(n >> (8 * i));
}
inline uint32_t read_stamp(const HostFrame& f) {
  ImageView v = f.view();
  uint32_t n = 0;
  int bytes = v.pw[0] * (sample_bytes(v.format));
  for (int i = 0; i < 4 && i < bytes; ++i) n |= static_cast<uint32_t>(v.row(0, 0)[i]) << (8 * i);
  return n;
}

// A source producing `count` frames: random content stamped with the frame number.
class TestSource : public Source {
 public:
  TestSource(FrameSpec spec, int64_t count, int delay_us = 0) : spec_(spec), count_(count), delay_us_(delay_us) {}
  FrameSpec spec() const override { return spec_; }
  std::string describe() const override { return "test"; }
  int64_t frame_count() const override { return count_; }
  bool read(HostFrame& dst) override {
    if (n_ >= count_) return false;
    if (fail_at_ >= 0 && n_ == fail_at_) throw std::runtime_error("test source failure");
    if (delay_us_) std::this_thread::sleep_for(std::chrono::microseconds(delay_us_));
    fill_random(dst, static_cast<uint32_t>(n_ * 7919 + 1));
    stamp(dst, static_cast<uint32_t>(n_));
    ++n_;
    return true;
  }
  int64_t fail_at_ = -1;

 private:
  FrameSpec spec_;
  int64_t count_, n_ = 0;
  int delay_us_;
};

// Keeps a copy of every frame it receives.
class CaptureSink : public Sink {
 public:
  explicit CaptureSink(int delay_us = 0, bool keep = true) : delay_us_(delay_us), keep_(keep) {}
  std::vector<PixelFormat> accepted_formats() const override { return {}; }
  void open(const FrameSpec& s) override {
    spec = s;
    opened = true;
  }
  void write(const HostFrame& f) override {
    if (delay_us_) std::this_thread::sleep_for(std::chrono::microseconds(delay_us_));
    if (fail_at >= 0 && static_cast<int64_t>(stamps.size()) == fail_at) throw std::runtime_error("test sink failure");
    stamps.push_back(read_stamp(f));
    indices.push_back(f.index);
    if (keep_) {
      frames.push_back(std::make_shared<HostFrame>(f.spec(), false));
      ImageView s = f.view(), d = frames.back()->view();
      int bpp = sample_bytes(s.format);
      for (int p = 0; p < plane_count(s.format); ++p)
        for (int y = 0; y < s.ph[p]; ++y) std::copy(s.row(p, y), s.row(p, y) + s.pw[p] * bpp, d.row(p, y));
    }
  }
  void close() override { ++closes; }
  std::string describe() const override { return "capture"; }

  FrameSpec spec;
  bool opened = false;
  int closes = 0;
  int64_t fail_at = -1;
  std::vector<uint32_t> stamps;
  std::vector<int64_t> indices;
  std::vector<std::shared_ptr<HostFrame>> frames;

 private:
  int delay_us_;
  bool keep_;
};

struct CmdResult {
  int rc = -1;
  std::string out;  // stdout + stderr
};
// Runs a shell command line, capturing stdout and stderr together.
inline CmdResult run_cmd(const std::string& cmd) {
  CmdResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

// A file's whole contents ("" when it cannot be read).
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

inline std::string tmp_path(const std::string& name) {
  std::string dir = ::testing::TempDir();
  if (!dir.empty() && dir.back() != '/') dir += '/';
  return dir + "vfpipe_" + std::to_string(::getpid()) + "_" + name;
}

// End-to-end latency (capture -> output) and the frame's own work (the sum of its step
// times: CPU stage times, or the GPU's copy and stage times from CUDA events), p99 over the
// frames after `warmup`, in milliseconds.
struct LatencyP99 {
  double end_to_end = 0, work = 0;          // p99
  double end_to_end_p90 = 0, work_p90 = 0;  // p90
  size_t frames = 0;
  double end_to_end_p50 = 0, work_p50 = 0;  // p50
};
// Descriptors this process has open (/proc/self/fd): leak checks compare it before and after.
inline size_t open_descriptor_count() {
  size_t n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd"); it != std::filesystem::directory_iterator();
       ++it)
    ++n;
  return n;
}

// A paced synthetic source (`synthetic` with realtime=1) through `filters` into a sink that
// only counts, with the live policy: what the latency tests measure.
inline RunResult run_paced_live(const std::string& synthetic, const std::string& filters, EngineConfig cfg) {
  SyntheticParams p = parse_synthetic(synthetic);
  p.pinned = cfg.backend == Backend::CUDA;
  SyntheticSource src(p);
  CaptureSink sink(0, false);
  Chain chain = Chain::build(build_stages(filters), src.spec(), {});
  sink.open(chain.output());
  cfg.policy = Policy::Live;
  return run_pipeline(src, chain, sink, cfg);
}

inline LatencyP99 latency_p99(const RunReport& rep, size_t warmup) {
  std::vector<double> e2e, work;
  for (size_t i = warmup; i < rep.frames.size(); ++i) {
    const FrameRecord& f = rep.frames[i];
    e2e.push_back((f.output_ns - f.capture_ns) / 1e6);
    double w = 0;
    for (float ms : f.step_ms) w += ms;
    work.push_back(w);
  }
  const Summary e = summarize(e2e), w = summarize(work);
  return {e.p99, w.p99, e.p90, w.p90, e2e.size(), e.p50, w.p50};
}
}  // namespace vfp::test
