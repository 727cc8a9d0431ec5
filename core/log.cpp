#include "core/log.hpp"

#include <atomic>
#include <cstdio>
#include <functional>
#include <mutex>
#include <vector>

#include "core/error.hpp"

namespace vfp {

std::string ParseError::pretty() const {
  std::string out = what();
  out += "\n  " + text_ + "\n  ";
  size_t p = pos_ > text_.size() ? text_.size() : pos_;
  out += std::string(p, ' ') + std::string(len_, '^');
  return out;
}

namespace log {
namespace {
std::atomic<int> g_level{static_cast<int>(Level::Info)};
std::mutex g_mu;
std::function<void(const std::string&)> g_writer;  // guarded by g_mu

void vlog(Level l, const char* tag, const char* fmt, va_list ap) {
  if (static_cast<int>(l) < g_level.load()) return;
  std::string msg = std::string("vfpipe: ") + tag;
  char buf[2048];
  vsnprintf(buf, sizeof buf, fmt, ap);
  msg += buf;
  msg += '\n';
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_writer)
    g_writer(msg);
  else
    std::fputs(msg.c_str(), stderr);
}
}  // namespace

void set_writer(std::function<void(const std::string&)> writer) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_writer = std::move(writer);
}

void set_level(Level l) { g_level = static_cast<int>(l); }
Level level() { return static_cast<Level>(g_level.load()); }

#define VFP_LOG_FN(name, lvl, tag)  \
  void name(const char* fmt, ...) { \
    va_list ap;                     \
    va_start(ap, fmt);              \
    vlog(lvl, tag, fmt, ap);        \
    va_end(ap);                     \
  }
VFP_LOG_FN(debug, Level::Debug, "debug: ")
VFP_LOG_FN(info, Level::Info, "")
VFP_LOG_FN(warn, Level::Warn, "warning: ")
VFP_LOG_FN(error, Level::Error, "error: ")
#undef VFP_LOG_FN

std::string format(const char* fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::vector<char> buf(static_cast<size_t>(n > 0 ? n : 0) + 1);
  vsnprintf(buf.data(), buf.size(), fmt, ap2);
  va_end(ap2);
  return std::string(buf.data(), static_cast<size_t>(n > 0 ? n : 0));
}

}  // namespace log
}  // namespace vfp
