#include "apps/vfpipe/progress.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>

#include "core/error.hpp"
#include "core/frame.hpp"
#include "core/log.hpp"

namespace vfp {

Progress::Progress(bool enabled, int64_t total, double rate)
    : enabled_(enabled && isatty(2)), total_(total), rate_(rate), start_ns_(now_ns()) {}

std::string render_progress_line(int64_t done, int64_t total, int64_t dropped, double elapsed, int width, double rate) {
  double fps = elapsed > 0 ? done / elapsed : 0;
  std::string tail = log::format(" %lld", static_cast<long long>(done));
  if (total > 0) tail += log::format("/%lld", static_cast<long long>(total));
  tail += log::format(" frames  %.1f fps", fps);
  if (rate > 0 && fps > 0) tail += log::format("  speed %.2fx", fps / rate);
  if (dropped > 0) tail += log::format("  %lld dropped", static_cast<long long>(dropped));
  if (total > 0 && fps > 0 && done < total) tail += log::format("  ETA %.0fs", (total - done) / fps);
  if (total <= 0) return tail.substr(1);
  int bar = width - static_cast<int>(tail.size()) - 8;
  if (bar < 10) bar = 10;
  double frac = total > 0 ? static_cast<double>(done) / total : 0;
  if (frac > 1) frac = 1;
  int fill = static_cast<int>(frac * bar);
  std::string s = "[" + std::string(fill, '#') + std::string(bar - fill, '.') + "]";
  return s + log::format(" %3.0f%%", frac * 100) + tail;
}

void Progress::update(int64_t done, int64_t dropped) {
  if (!enabled_ || log::level() > log::Level::Info) return;
  std::lock_guard<std::mutex> lk(mu_);
  int64_t t = now_ns();
  if (t - last_draw_ns_ < 100000000 && done != total_) return;
  last_draw_ns_ = t;
  winsize ws{};
  int width = (ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20) ? ws.ws_col : 80;
  std::string line = render_progress_line(done, total_, dropped, (t - start_ns_) / 1e9, width - 1, rate_);
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void Progress::finish() {
  std::lock_guard<std::mutex> lk(mu_);
  if (drawn_) std::fprintf(stderr, "\r\033[K");
  drawn_ = false;
}

size_t resident_bytes() {
  long pages = 0, resident = 0;
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  const int n = std::fscanf(f, "%ld %ld", &pages, &resident);
  std::fclose(f);
  return n == 2 ? static_cast<size_t>(resident) * static_cast<size_t>(sysconf(_SC_PAGESIZE)) : 0;
}

PeriodicStats::PeriodicStats(double period_s, std::function<size_t()> gpu_memory)
    : period_ns_(static_cast<int64_t>(period_s * 1e9)),
      start_ns_(now_ns()),
      window_start_ns_(start_ns_),
      gpu_memory_(std::move(gpu_memory)) {}

void PeriodicStats::frame(const FrameRecord& rec, int64_t dropped_total) {
  e2e_ms_.push_back((rec.output_ns - rec.capture_ns) / 1e6);
  if (rec.output_ns - window_start_ns_ >= period_ns_) emit(rec.output_ns, dropped_total);
}

void PeriodicStats::finish(int64_t dropped_total) {
  if (!e2e_ms_.empty()) emit(now_ns(), dropped_total);
}

void PeriodicStats::emit(int64_t now, int64_t dropped_total) {
  const Summary l = summarize(e2e_ms_);
  const double span = (now - window_start_ns_) / 1e9;
  std::string line = log::format(
      "stats: t=%.0fs frames=%zu fps=%.1f dropped=%lld e2e_ms p50=%.3f p99=%.3f max=%.3f "
      "rss_mb=%.1f",
      (now - start_ns_) / 1e9, l.count, span > 0 ? l.count / span : 0.0,
      static_cast<long long>(dropped_total - dropped_at_window_start_), l.p50, l.p99, l.max,
      resident_bytes() / 1048576.0);
  if (gpu_memory_) line += log::format(" gpu_mb=%.1f", gpu_memory_() / 1048576.0);
  std::fprintf(stderr, "%s\n", line.c_str());
  e2e_ms_.clear();
  window_start_ns_ = now;
  dropped_at_window_start_ = dropped_total;
}

ProgressFile::ProgressFile(const std::string& path, double rate)
    : f_(path == "-" ? stderr : std::fopen(path.c_str(), "w")), own_(path != "-"), rate_(rate), start_ns_(now_ns()) {
  if (!f_) throw Error(ErrorKind::Output, "-progress: cannot write '" + path + "'");
}
ProgressFile::~ProgressFile() {
  if (own_ && f_) std::fclose(f_);
}
void ProgressFile::update(int64_t done, int64_t dropped) {
  const int64_t t = now_ns();
  if (t - last_ns_ < 500000000) return;
  last_ns_ = t;
  write(done, dropped, false);
}
void ProgressFile::finish(int64_t done, int64_t dropped) { write(done, dropped, true); }
void ProgressFile::write(int64_t done, int64_t dropped, bool end) {
  const double elapsed = (now_ns() - start_ns_) / 1e9;
  const double fps = elapsed > 0 ? done / elapsed : 0;
  const double out_s = rate_ > 0 ? done / rate_ : 0;
  std::fprintf(f_, "frame=%lld\nfps=%.2f\ndrop_frames=%lld\nout_time_us=%lld\nspeed=%.3gx\nprogress=%s\n",
               static_cast<long long>(done), fps, static_cast<long long>(dropped), static_cast<long long>(out_s * 1e6),
               elapsed > 0 && rate_ > 0 ? out_s / elapsed : 0.0, end ? "end" : "continue");
  std::fflush(f_);
}

}  // namespace vfp
