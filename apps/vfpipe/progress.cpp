#include "apps/vfpipe/progress.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>

#include "pipeline/frame.hpp"
#include "pipeline/log.hpp"

namespace vfp {

Progress::Progress(bool enabled, int64_t total)
    : enabled_(enabled && isatty(2)), total_(total), start_ns_(now_ns()) {}

std::string render_progress_line(int64_t done, int64_t total, int64_t dropped, double elapsed,
                                 int width) {
  double fps = elapsed > 0 ? done / elapsed : 0;
  std::string tail = log::format(" %lld", static_cast<long long>(done));
  if (total > 0) tail += log::format("/%lld", static_cast<long long>(total));
  tail += log::format(" frames  %.1f fps", fps);
  if (dropped > 0) tail += log::format("  %lld dropped", static_cast<long long>(dropped));
  if (total > 0 && fps > 0 && done < total)
    tail += log::format("  ETA %.0fs", (total - done) / fps);
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
  std::string line = render_progress_line(done, total_, dropped, (t - start_ns_) / 1e9, width - 1);
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void Progress::finish() {
  std::lock_guard<std::mutex> lk(mu_);
  if (drawn_) std::fprintf(stderr, "\r\033[K");
  drawn_ = false;
}

}  // namespace vfp
