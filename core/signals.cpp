#include "core/signals.hpp"

#include <unistd.h>

#include <csignal>

namespace vfp {

std::atomic<int>& stop_flag() {
  static std::atomic<int> flag{0};
  return flag;
}

std::atomic<int>& signal_count() {
  static std::atomic<int> count{0};
  return count;
}

namespace {
std::atomic<int> g_exit_at{2};

extern "C" void on_signal(int sig) {
  stop_flag().store(sig);
  if (signal_count().fetch_add(1) + 1 >= g_exit_at.load()) {
    static const char msg[] = "\nvfpipe: signal again, exiting now\n";
    ssize_t r = write(2, msg, sizeof msg - 1);
    (void)r;
    _exit(128 + sig);
  }
}
}  // namespace

void install_signal_handlers(int exit_at) {
  g_exit_at.store(exit_at < 1 ? 1 : exit_at);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocking read returns EINTR and sees the flag
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  // Over a file-size limit, write() fails with EFBIG (reported, earlier output kept) instead
  // of the process being killed mid-file.
  std::signal(SIGXFSZ, SIG_IGN);
}

}  // namespace vfp
